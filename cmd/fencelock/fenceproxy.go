package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/clock"
	"github.com/fencelock/fencelock/fence"
	"github.com/fencelock/fencelock/fence/filefence"
)

const fenceProxyUsage = `Usage: fencelock fence-proxy --listen ADDR --upstream URL --state DIR
                             [--resource-from path|path:clean|path:raw|header:NAME]
                             [--resource-case exact|fold] [--max-resource BYTES]
                             [--pass METHODS] [--read-methods METHODS]
                             [--method-override HEADER] [--allow-upgrade]
                             [--verify ADDRS (--lock-key KEY | --key-map PATTERN=KEY ... |
                                              --bind-on-first-use) [--verify-timeout D]
                                             [client TLS/auth flags]]
                             [--upstream-timeout D]

Fences an HTTP service that cannot check fencing tokens itself: a reverse
proxy in front of it that forwards a request only if its Fencing-Token
header is at least the highest token already honoured for the request's
resource (the URL path, or the value of header NAME). The marks live in
DIR (fsynced before a request is forwarded), so a restarted proxy still
refuses a token it had superseded. One proxy per DIR.

The resource fenced is exactly the one forwarded. With --resource-from
path, a path an upstream could read as another path is refused: empty
segments (//), . or .. segments, a trailing slash, an encoded slash
(%2F), a backslash, a control character, an encoded % (%25), a ; (path
parameters), a segment ending in a dot or a space, a non-ASCII character
or bytes that are not UTF-8. path:clean fences and forwards the cleaned
path instead (/data//x/../a/ is /data/a; %2F is a slash), and refuses the
rest. path:raw is path for an upstream that takes %25, ;, trailing dots
and spaces and non-ASCII as they are. With header:NAME, a request with
two NAME headers, a list in one (a, b), NAME spelt with an underscore,
or a Connection header naming NAME, is refused. --resource-case fold
lower-cases the resource, fenced and forwarded, for an upstream that does
not tell ACCT from acct. A path or resource name longer than
--max-resource (1024 bytes) is refused: each is a mark kept for good.

No side doors. A request that asks to switch protocols (Upgrade:
websocket, h2c), CONNECT, and an HTTP/2 preface are refused (400
tunnel_refused): nothing inside a tunnel is fenced. --allow-upgrade
forwards an upgrade, fenced as a write whatever its method, and then
checks nothing inside the tunnel (which holds its resource while open,
up to --upstream-timeout). Method-override headers (X-HTTP-Method-
Override, X-Method-Override, X-HTTP-Method) and a _method query are
refused (400 method_override): the upstream would apply another method
than the one fenced; --method-override HEADER honours that one header,
and requests are fenced, passed or read by the method it names. The
token, key, resource and override headers announced as trailers are
refused (400 trailer_refused).

Refusals are the fence middleware's JSON: 409 stale_token (naming the
token and the highest honoured), 409 missing_token, 400 invalid_token
(also for two Fencing-Token headers); 400 noncanonical_path,
duplicate_resource, hop_by_hop_resource, resource_too_long,
tunnel_refused, method_override, trailer_refused, and missing_resource
when the request lacks the header NAME; 502 upstream_unreachable.

A token is honoured (the mark raised, on disk) before the request is
forwarded, whatever the upstream then answers: once a newer holder has
shown up, older ones are stale even if its request failed. Requests for
one resource are forwarded one at a time, each only after the previous
answer is back, so an older request cannot overtake a newer one on the
way. Methods in --pass (e.g. GET,HEAD) are forwarded unfenced, as they
came.

For a resource guarded by a read/write lock, --read-methods GET,HEAD
fences those methods by the read rule: a reader sends its read hold's
token, which must be at least the last write's (readers granted together
do not stale each other), and a write must be at least every token
admitted, reads included. Reads are fenced, not waved through: no token
is 409 missing_token, as for a write. Reads of one resource are forwarded
one at a time, as writes are.

With --verify, a token above a resource's mark is forwarded only once the
cluster confirms it is a live grant of the lock key guarding the resource
(one check per new token per resource; the current token is not asked
about again): a made-up token, or another key's live token, is refused
with 409 unverified_token or wrong_key and raises nothing. The key is
bound by configuration: --key-map PATTERN=KEY (repeatable; a pattern is
a resource, or a prefix ending in *; the longest match wins), else
--lock-key KEY (say ledger/{resource}); a resource neither binds is 409
unbound_resource. --bind-on-first-use instead binds an unbound resource
to the Fencing-Key of the first request the cluster confirms for it
(anyone with a live token of any key can then take a fresh resource;
logged at WARN). The cluster is asked before the resource is held: while
it is slow or down, the current holder's requests go on, and a new token
is refused with 503 fence_unavailable after --verify-timeout (2s).

No reordering, on a restart either: each forwarded request is cut off
after --upstream-timeout (504 upstream_timeout), and one that got no
answer (cut off, the client gone, the connection lost) keeps its resource
until --upstream-timeout has passed since it was sent. A proxy that
starts after one that did not stop cleanly (killed, or --grace ran out)
forwards nothing fenced for --upstream-timeout. So the upstream must
apply or drop every request within --upstream-timeout of receiving it:
set its own request timeout below it.

At start the proxy logs, at WARN, each 'fencelock fence reset' made on
DIR since a proxy last ran on it.

The limit: only requests through the proxy are fenced. A writer that
reaches the upstream another way is not, so the upstream should accept
writes from the proxy only. See docs/FENCING.md.
`

// proxyConfig is what a fence proxy forwards, and how it names resources.
type proxyConfig struct {
	upstream *url.URL
	resource proxyResource
	pass     []string // methods forwarded unfenced, as they came
	reads    []string // methods admitted by the read rule (f must be a fence.RWFence)
	// upstreamTimeout bounds each forwarded request, and is how long a
	// request that got no answer keeps its resource (0: no bound).
	upstreamTimeout time.Duration
	// holdUntil: no fenced request is forwarded before it (a start after
	// a proxy that did not stop cleanly; see proxyStart).
	holdUntil time.Time
	clock     clock.Clock // nil: the system's
	// allowUpgrade: a request asking to switch protocols is fenced as a
	// write and forwarded, tunnel and all (--allow-upgrade); else refused.
	allowUpgrade bool
	// override is the method-override header honoured (canonical; ""
	// none, and every override header is refused).
	override string
}

// readsOf admits by an RWFence's read rule.
type readsOf struct{ f fence.RWFence }

func (r readsOf) Admit(ctx context.Context, name string, token uint64, effect func(context.Context) error) error {
	return r.f.AdmitRead(ctx, name, token, effect)
}

// forwarded is what the proxy learns of one forwarded request.
type forwarded struct{ unanswered bool }

type forwardedKey struct{}

// newFenceProxy forwards to upstream the requests f admits. The upstream
// request runs inside f.Admit: the mark is raised before it is sent, and
// the next request for the same resource waits for its answer, or, when
// no answer comes, until the upstream can no longer apply it. What is
// forwarded names the resource fenced, spelt as it was fenced.
func newFenceProxy(f fence.Fence, cfg proxyConfig) http.Handler {
	clk := cfg.clock
	if clk == nil {
		clk = clock.System{}
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(cfg.upstream)
			pr.SetXForwarded()
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if fw, ok := r.Context().Value(forwardedKey{}).(*forwarded); ok {
				fw.unanswered = true
			}
			switch {
			case errors.Is(r.Context().Err(), context.DeadlineExceeded):
				proxyError(w, http.StatusGatewayTimeout, "upstream_timeout", fmt.Sprintf("fence-proxy: the upstream did not answer within --upstream-timeout (%v)", cfg.upstreamTimeout))
			case r.Context().Err() != nil:
				// The client went away; nobody to answer.
			default:
				proxyError(w, http.StatusBadGateway, "upstream_unreachable", "fence-proxy: upstream: "+err.Error())
			}
		},
	}
	forward := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sent := clk.Now()
		fw := &forwarded{}
		ctx := context.WithValue(r.Context(), forwardedKey{}, fw)
		if cfg.upstreamTimeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, cfg.upstreamTimeout)
			defer cancel()
		}
		rp.ServeHTTP(w, r.WithContext(ctx))
		if fw.unanswered && cfg.upstreamTimeout > 0 {
			// The upstream may have the request and apply it yet: keep
			// the resource (this runs inside Admit) until it cannot.
			sleepUntil(context.WithoutCancel(r.Context()), clk, sent.Add(cfg.upstreamTimeout))
		}
	})
	// A Fence's Admit is a write (an RWFence's Admit is AdmitWrite).
	write, read := fence.Middleware(f, cfg.resource.of, forward), http.Handler(nil)
	if rw, ok := f.(fence.RWFence); ok && len(cfg.reads) > 0 {
		read = fence.Middleware(readsOf{rw}, cfg.resource.of, forward)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		door, rerr := cfg.doors(r)
		if rerr == nil {
			rerr = cfg.trailers(r)
		}
		if rerr != nil {
			proxyError(w, http.StatusBadRequest, rerr.code, "fence-proxy: "+rerr.msg)
			return
		}
		// An upgrade is fenced as a write whatever its method: its tunnel
		// may carry anything.
		if !door.upgrade && slices.Contains(cfg.pass, door.method) {
			rp.ServeHTTP(w, r)
			return
		}
		if _, rerr := cfg.resource.name(r); rerr != nil {
			proxyError(w, http.StatusBadRequest, rerr.code, "fence-proxy: "+rerr.msg)
			return
		}
		if !sleepUntil(r.Context(), clk, cfg.holdUntil) {
			return // the client gave up during the hold
		}
		if read != nil && !door.upgrade && slices.Contains(cfg.reads, door.method) {
			read.ServeHTTP(w, r)
			return
		}
		write.ServeHTTP(w, r)
	})
}

// methods reads a comma-separated list of HTTP methods.
func methods(list string) []string {
	var out []string
	for _, m := range strings.Split(list, ",") {
		if m = strings.ToUpper(strings.TrimSpace(m)); m != "" {
			out = append(out, m)
		}
	}
	return out
}

// sleepUntil waits on clk until t; false if ctx ended first.
func sleepUntil(ctx context.Context, clk clock.Clock, t time.Time) bool {
	d := t.Sub(clk.Now())
	if d <= 0 {
		return true
	}
	done := make(chan struct{})
	timer := clk.AfterFunc(d, func() { close(done) })
	defer timer.Stop()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}

// stoppedFile, in a proxy's --state, says that the proxy that last ran on
// it stopped with every forwarded request answered or waited out.
const stoppedFile = "proxy-stopped"

// proxyStart opens the fence in dir for a proxy starting at now, and says
// until when it must forward no fenced request: now + timeout if a proxy
// ran on dir before and did not record a clean stop (it may have been
// killed with requests on their way, which the upstream may still apply
// within timeout), else nothing. It removes the clean-stop record before
// it returns, so that a crash from now on is seen by the next start.
func proxyStart(dir string, timeout time.Duration, now time.Time, opts ...filefence.Option) (*filefence.Fence, time.Time, error) {
	used := false
	for _, name := range []string{filefence.FileName, filefence.LogName} {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			used = true
		}
	}
	ff, err := filefence.Open(dir, opts...)
	if err != nil {
		return nil, time.Time{}, err
	}
	stopped := filepath.Join(dir, stoppedFile)
	_, err = os.Stat(stopped)
	clean := err == nil
	if clean {
		err = os.Remove(stopped)
		if err == nil {
			err = syncDir(dir)
		}
		if err != nil {
			ff.Close()
			return nil, time.Time{}, err
		}
	}
	if !used || clean || timeout <= 0 {
		return ff, time.Time{}, nil
	}
	return ff, now.Add(timeout), nil
}

// proxyStopped records a clean stop in dir (after every request ended).
func proxyStopped(dir string) error {
	f, err := os.Create(filepath.Join(dir, stoppedFile))
	if err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// proxyBinding is how a verifying proxy binds resources to lock keys.
type proxyBinding struct {
	keyMap   fence.KeyMap // --key-map, and --lock-key as its * entry
	firstUse bool         // --bind-on-first-use
	timeout  time.Duration
	onBind   func(resource, key string, token uint64)
}

// proxyVerification verifies with v, resources bound as b says.
func proxyVerification(v fence.Verifier, b proxyBinding) *fence.Verification {
	fv := &fence.Verification{Verifier: v, BindOnFirstUse: b.firstUse, Timeout: b.timeout, OnBind: b.onBind}
	if len(b.keyMap) > 0 {
		fv.Key = b.keyMap.Key
	}
	return fv
}

func proxyError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg, "code": code})
}

func runFenceProxy(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "fence-proxy", fenceProxyUsage)
	listen := f.String("listen", "127.0.0.1:7490", "`ADDR` to listen on (port 0 picks one)")
	upstreamFlag := f.String("upstream", "", "the service to fence, `URL` (http://host:port)")
	state := f.String("state", "", "`DIR` for the highest tokens honoured (created if missing)")
	from := f.String("resource-from", "path", "`SPEC` of what names a request's resource: path, path:clean or header:NAME")
	caseMode := f.String("resource-case", "exact", "`MODE` exact, or fold for an upstream that does not tell ACCT from acct")
	passFlag := f.String("pass", "", "comma-separated `METHODS` forwarded without a token (e.g. GET,HEAD)")
	readsFlag := f.String("read-methods", "", "comma-separated `METHODS` fenced as reads of a read/write lock (e.g. GET,HEAD): a reader's token must reach the last write's")
	grace := f.Duration("grace", 5*time.Second, "how long in-flight requests may finish on SIGINT/SIGTERM")
	upstreamTimeout := f.Duration("upstream-timeout", 10*time.Second, "`D` the upstream must apply or drop a request within: each forwarded request is cut off after it, and after a crash nothing is forwarded for it")
	verify := f.String("verify", "", "cluster `ADDRS` to verify each new token with before it raises a mark (host:port,...); needs --lock-key, --key-map or --bind-on-first-use")
	lockKey := f.String("lock-key", "", "the lock `KEY` guarding each resource --key-map does not bind, {resource} standing for its name (with --verify)")
	var keyMap ruleList
	f.Var(&keyMap, "key-map", "`PATTERN=KEY`: resources matching PATTERN (a name, or a prefix ending in *) are guarded by lock key KEY ({resource} stands for the name); repeat for more; the longest pattern wins (with --verify)")
	firstUse := f.Bool("bind-on-first-use", false, "bind a resource no --lock-key or --key-map binds to the Fencing-Key of the first request whose token the cluster confirms (anyone with a live token of any key can then take a fresh resource; logged at WARN)")
	verifyTimeout := f.Duration("verify-timeout", fence.DefaultVerifyTimeout, "`D` to wait for the cluster's answer about a new token; past it the request is refused with 503 fence_unavailable (with --verify)")
	allowUpgrade := f.Bool("allow-upgrade", false, "forward requests that switch protocols (Upgrade: websocket, h2c), fenced as writes; nothing inside the tunnel is checked")
	override := f.String("method-override", "", "the method-override `HEADER` the upstream honours (e.g. X-HTTP-Method-Override): requests are fenced by its method; without it every such header is refused")
	maxResource := f.Int("max-resource", defaultMaxResource, "the longest path or resource name, in `BYTES`, the proxy fences (each is a mark kept for good)")
	tlsFlags := addClientTLSFlags(f)
	authToken := authTokenFlag(f)
	pos, err := f.parse(args)
	if err != nil {
		return err
	}
	if err := noArgs(pos); err != nil {
		return err
	}
	if *upstreamFlag == "" {
		return usageError("--upstream is required")
	}
	if *state == "" {
		return usageError("--state is required (without it a restart would forget every token)")
	}
	upstream, err := url.Parse(*upstreamFlag)
	if err != nil || (upstream.Scheme != "http" && upstream.Scheme != "https") || upstream.Host == "" {
		return usageError("--upstream %q: want http://HOST:PORT or https://HOST:PORT", *upstreamFlag)
	}
	resource, err := parseResourceFrom(*from, *caseMode)
	if err != nil {
		return err
	}
	if *maxResource < 1 {
		return usageError("--max-resource must be at least 1, not %d", *maxResource)
	}
	resource.maxLen = *maxResource
	if *override != "" {
		if !validHeaderName(*override) {
			return usageError("--method-override %q is not a header name", *override)
		}
		*override = http.CanonicalHeaderKey(*override)
		for _, h := range append(append([]string{}, hopByHop...), fence.KeyHeader) {
			if headerAlias(h) == headerAlias(*override) {
				return usageError("--method-override %s: a hop-by-hop or fencing header cannot carry a method", *override)
			}
		}
		if resource.header != "" && headerAlias(resource.header) == headerAlias(*override) {
			return usageError("--method-override %s names the resource header too", *override)
		}
	}
	pass, reads := methods(*passFlag), methods(*readsFlag)
	for _, m := range reads {
		if slices.Contains(pass, m) {
			return usageError("%s is in both --pass and --read-methods: forwarded unfenced, or fenced as a read?", m)
		}
	}
	log := slog.New(slog.NewTextHandler(e.stderr, nil))
	var opts []filefence.Option
	for _, fl := range []string{"lock-key", "key-map", "bind-on-first-use", "verify-timeout"} {
		if *verify == "" && f.given(fl) {
			return usageError("--%s is for --verify; give --verify ADDRS too", fl)
		}
	}
	if *verify != "" {
		km, err := fence.ParseKeyMap(keyMap...)
		if err != nil {
			return usageError("--key-map: %v", err)
		}
		if *lockKey != "" {
			if _, ok := km["*"]; ok {
				return usageError("--lock-key is the key of every resource --key-map does not bind, and --key-map has a * pattern already")
			}
			km["*"] = *lockKey
		}
		if len(km) == 0 && !*firstUse {
			return usageError("--verify needs to know which lock key guards each resource: --lock-key KEY, --key-map PATTERN=KEY, or (trusting the first request to each resource) --bind-on-first-use")
		}
		if *verifyTimeout <= 0 {
			return usageError("--verify-timeout must be positive, not %v", *verifyTimeout)
		}
		c, err := (&clientFlags{addr: verify, tls: tlsFlags, authToken: authToken}).client()
		if err != nil {
			return err
		}
		defer c.Close()
		b := proxyBinding{keyMap: km, firstUse: *firstUse, timeout: *verifyTimeout}
		if *firstUse {
			log.Warn("fence-proxy: --bind-on-first-use: a resource no --lock-key or --key-map binds is bound to the lock key named by the first request the cluster confirms; anyone with a live token of any key can take a fresh resource that way")
			b.onBind = func(resource, key string, token uint64) {
				log.Warn("fence-proxy: resource bound on first use", "resource", resource, "key", key, "token", token)
			}
		}
		opts = append(opts, filefence.WithVerification(proxyVerification(client.NewVerifier(c), b)))
	}
	if *upstreamTimeout < 0 {
		return usageError("--upstream-timeout must be positive (or 0 for none), not %v", *upstreamTimeout)
	}
	ff, hold, err := proxyStart(*state, *upstreamTimeout, time.Now(), opts...)
	if err != nil {
		return fmt.Errorf("fence-proxy: %w", err)
	}
	defer ff.Close()
	if err := logResetsSince(*state, log); err != nil {
		log.Warn("fence-proxy: could not read "+filepath.Join(*state, resetsLog), "err", err)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("fence-proxy: %w", err)
	}
	// The first line says where: a script (or test) can start on port 0.
	verifying := ""
	if *verify != "" {
		verifying = ", verifying with " + *verify
	}
	fmt.Fprintf(e.stdout, "fence-proxy listening on http://%s, fencing %s, marks in %s%s\n", ln.Addr(), upstream, *state, verifying)
	if !hold.IsZero() {
		log.Warn(fmt.Sprintf("fence-proxy: the last proxy on %s did not stop cleanly: forwarding nothing fenced until %s (--upstream-timeout %v), when nothing it sent can still be applied",
			*state, hold.Format(time.RFC3339Nano), *upstreamTimeout))
	}
	if *allowUpgrade {
		log.Warn("fence-proxy: --allow-upgrade: a request that switches protocols is fenced as a write, and then nothing inside its tunnel is checked")
	}
	cfg := proxyConfig{upstream: upstream, resource: resource, pass: pass, reads: reads, upstreamTimeout: *upstreamTimeout, holdUntil: hold,
		allowUpgrade: *allowUpgrade, override: *override}
	srv := &http.Server{Handler: newFenceProxy(ff, cfg), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("fence-proxy: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), *grace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return nil // requests left on their way: the next start holds
		}
		return fmt.Errorf("fence-proxy: %w", err)
	}
	if err := proxyStopped(*state); err != nil {
		return fmt.Errorf("fence-proxy: recording a clean stop: %w", err)
	}
	return nil
}
