package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/fence"
	"github.com/fencelock/fencelock/fence/filefence"
)

const fenceProxyUsage = `Usage: fencelock fence-proxy --listen ADDR --upstream URL --state DIR
                             [--resource-from path|path:clean|header:NAME]
                             [--resource-case exact|fold] [--pass METHODS]
                             [--verify ADDRS [--lock-key KEY] [client TLS/auth flags]]

Fences an HTTP service that cannot check fencing tokens itself: a reverse
proxy in front of it that forwards a request only if its Fencing-Token
header is at least the highest token already honoured for the request's
resource (the URL path, or the value of header NAME). The marks live in
DIR (fsynced before a request is forwarded), so a restarted proxy still
refuses a token it had superseded. One proxy per DIR.

The resource fenced is exactly the one forwarded. With --resource-from
path, a path an upstream could read as another path is refused: empty
segments (//), . or .. segments, a trailing slash, an encoded slash
(%2F), a backslash or a control character. path:clean fences and
forwards the cleaned path instead (/data//x/../a/ is /data/a; %2F is a
slash). With header:NAME, a request with two NAME headers (or NAME_ spelt
with an underscore), or whose Connection header names NAME, is refused.
--resource-case fold lower-cases the resource, fenced and forwarded, for
an upstream that does not tell ACCT from acct.

Refusals are the fence middleware's JSON: 409 stale_token (naming the
token and the highest honoured), 409 missing_token, 400 invalid_token
(also for two Fencing-Token headers); 400 noncanonical_path,
duplicate_resource, hop_by_hop_resource, and missing_resource when the
request lacks the header NAME; 502 upstream_unreachable.

A token is honoured (the mark raised, on disk) before the request is
forwarded, whatever the upstream then answers: once a newer holder has
shown up, older ones are stale even if its request failed. Requests for
one resource are forwarded one at a time, each only after the previous
answer is back, so an older request cannot overtake a newer one on the
way. Methods in --pass (e.g. GET,HEAD) are forwarded unfenced, as they
came.

With --verify, a token above a resource's mark is forwarded only once the
cluster confirms it is a live grant of the lock key guarding the resource
(one check per new token per resource; the current token is not asked
about again): a made-up token, or another key's live token, is refused
with 409 unverified_token or wrong_key and raises nothing. The key is
--lock-key (say ledger/{resource}), or else the Fencing-Key header of the
first request a verified token raised the resource for, recorded with the
mark; 400 missing_key when neither names one. While the cluster cannot be
reached, new tokens are refused (503 fence_unavailable) and the current
ones still pass.

The limit: only requests through the proxy are fenced. A writer that
reaches the upstream another way is not, so the upstream should accept
writes from the proxy only. See docs/FENCING.md.
`

// proxyConfig is what a fence proxy forwards, and how it names resources.
type proxyConfig struct {
	upstream *url.URL
	resource proxyResource
	pass     []string // methods forwarded unfenced, as they came
}

// newFenceProxy forwards to upstream the requests f admits. The upstream
// request runs inside f.Admit: the mark is raised before it is sent, and
// the next request for the same resource waits for its answer. What is
// forwarded names the resource fenced, spelt as it was fenced.
func newFenceProxy(f fence.Fence, cfg proxyConfig) http.Handler {
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(cfg.upstream)
			pr.SetXForwarded()
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() != nil {
				return // the client went away; nobody to answer
			}
			proxyError(w, http.StatusBadGateway, "upstream_unreachable", "fence-proxy: upstream: "+err.Error())
		},
	}
	fenced := fence.Middleware(f, cfg.resource.of, rp)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if slices.Contains(cfg.pass, r.Method) {
			rp.ServeHTTP(w, r)
			return
		}
		if _, rerr := cfg.resource.name(r); rerr != nil {
			proxyError(w, http.StatusBadRequest, rerr.code, "fence-proxy: "+rerr.msg)
			return
		}
		fenced.ServeHTTP(w, r)
	})
}

// proxyVerification verifies with v, resources bound by template
// ({resource} replaced by the resource's name; "" binds each resource to
// the key its first verified request names).
func proxyVerification(v fence.Verifier, template string) *fence.Verification {
	fv := &fence.Verification{Verifier: v}
	if template != "" {
		fv.Key = func(resource string) string { return strings.ReplaceAll(template, "{resource}", resource) }
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
	grace := f.Duration("grace", 5*time.Second, "how long in-flight requests may finish on SIGINT/SIGTERM")
	verify := f.String("verify", "", "cluster `ADDRS` to verify each new token with before it raises a mark (host:port,...)")
	lockKey := f.String("lock-key", "", "the lock `KEY` guarding each resource, {resource} standing for its name (with --verify; default: the request's Fencing-Key, bound by the first verified token)")
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
	var pass []string
	for _, m := range strings.Split(*passFlag, ",") {
		if m = strings.ToUpper(strings.TrimSpace(m)); m != "" {
			pass = append(pass, m)
		}
	}
	var opts []filefence.Option
	if *verify == "" && *lockKey != "" {
		return usageError("--lock-key binds resources for --verify; give --verify ADDRS too")
	}
	if *verify != "" {
		c, err := (&clientFlags{addr: verify, tls: tlsFlags, authToken: authToken}).client()
		if err != nil {
			return err
		}
		defer c.Close()
		opts = append(opts, filefence.WithVerification(proxyVerification(client.NewVerifier(c), *lockKey)))
	}
	ff, err := filefence.Open(*state, opts...)
	if err != nil {
		return fmt.Errorf("fence-proxy: %w", err)
	}
	defer ff.Close()
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
	srv := &http.Server{Handler: newFenceProxy(ff, proxyConfig{upstream: upstream, resource: resource, pass: pass}), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("fence-proxy: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), *grace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("fence-proxy: %w", err)
	}
	return nil
}
