package client

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/client/internal/transport"
)

// DefaultAddr is where a server listens when nothing else is said.
const DefaultAddr = "127.0.0.1:7470"

// Client talks to one fencelock server, or to any node of a cluster. It is
// safe for concurrent use and reuses its HTTP connections; make one and
// share it.
type Client struct {
	hc         *http.Client
	clock      Clock
	retries    int
	backoff    time.Duration
	maxBackoff time.Duration
	framed     bool
	waitCheck  time.Duration
	auth       authState
	rnd        random      // jitter, back-off and request ids (WithRandom)
	tls        *tls.Config // for https:// addresses; nil: Go's defaults
	optErr     error       // an option that could not be applied

	addrs *transport.Addrs // the nodes; the one that answered last (the leader, in a cluster) first
	conns *transport.Conns
	// answered is set once any node has answered this client: from then
	// on a refused connection is a node restarting or a failover in
	// progress, worth retrying; before, one refused by every address
	// means no server is there (NoServerError).
	answered atomic.Bool
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient sets the HTTP client. The default has connect and TLS
// handshake timeouts but no overall timeout, because an acquire that waits
// in the queue legitimately takes as long as its wait: bound calls with ctx.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// WithFramed chooses how requests travel to http:// addresses. With true
// (the default) the client keeps one framed connection per server and
// carries every request on it, many at once (the server's framed protocol,
// on the same port): several times the throughput of HTTP/1.1 for the same
// CPU. A server that speaks only HTTP is noticed on the first request and
// reached over HTTP from then on. With false every request is HTTP/1.1.
// https:// addresses carry framed connections over TLS (WithTLSConfig).
func WithFramed(on bool) Option { return func(c *Client) { c.framed = on } }

// WithClock sets the clock that lease deadlines and retry back-off are
// measured on (default SystemClock).
func WithClock(clk Clock) Option { return func(c *Client) { c.clock = clk } }

// WithRetries sets how many rounds of retries a call makes after the
// server could not be reached or was unavailable (default 6). A round tries
// every address once; between rounds the client backs off with jittered
// exponential delays, so the default rides out a leader election of about
// two seconds (25ms..1s per wait, about 1.3 to 2.6 s in all). A write
// carries the same request_id on every try, so the server applies it at
// most once. A call is not retried where no retry can help: before any node
// has answered this Client, a connection refused (or a host name unknown)
// at every address fails it at once with a *NoServerError; a TLS handshake
// refused over certificates, with a *TLSError.
func WithRetries(n int) Option { return func(c *Client) { c.retries = max(n, 0) } }

// WithWaitCheck sets how long any call may go unanswered before the client
// asks the node it went to whether it still answers at all (GET /healthz),
// how long that node has to answer, and how often it is asked again while
// the call is out (default 1s). A node that does not answer in time (it
// froze, or it was cut off: a stopped process's kernel still accepts
// connections) is left, and the call goes on at the next node with the same
// request id: a write is applied at most once, and a wait keeps its queue
// place and is never granted twice. A call moves within about two of these
// intervals after its node stopped answering, whatever the ctx allows: a
// Release with context.Background() included. A node that answers but
// loses leadership answers its waits not_leader itself. A leader too loaded
// to answer its health check in time is left too, and a wait queues there
// again behind those that came meanwhile: keep the interval well above the
// answer times seen under load.
func WithWaitCheck(d time.Duration) Option {
	return func(c *Client) {
		if d > 0 {
			c.waitCheck = d
		}
	}
}

// WithBackoff sets the first back-off between retries and its cap (default
// 50ms and 1s). Each wait is drawn uniformly from [d/2, d].
func WithBackoff(first, limit time.Duration) Option {
	return func(c *Client) { c.backoff, c.maxBackoff = first, limit }
}

// New returns a client for the servers at addrs. An address is host:port or
// an http(s) URL; an element may hold several, comma-separated. In a cluster,
// give every node: the client moves to the next one when a node cannot be
// reached and follows a node that names the leader.
func New(addrs []string, opts ...Option) (*Client, error) {
	c := &Client{
		clock:      SystemClock{},
		retries:    6,
		backoff:    50 * time.Millisecond,
		maxBackoff: time.Second,
		framed:     true,
		waitCheck:  time.Second,
	}
	for _, o := range opts {
		o(c)
	}
	if c.optErr != nil {
		return nil, c.optErr
	}
	var list []string
	for _, a := range addrs {
		for _, one := range strings.Split(a, ",") {
			one = strings.TrimSpace(one)
			if one == "" {
				continue
			}
			u, err := transport.BaseURL(one, c.defaultScheme())
			if err != nil {
				return nil, invalidf("addr", "%v", err)
			}
			list = append(list, u)
		}
	}
	if len(list) == 0 {
		return nil, invalidf("addr", "no server address given")
	}
	c.addrs = transport.NewAddrs(list)
	c.conns = transport.New(transport.Config{HTTP: c.hc, Framed: c.framed, TLS: c.tls, Token: c.auth.token})
	return c, nil
}

// Addrs returns the server base URLs, the preferred one first.
func (c *Client) Addrs() []string { return c.addrs.All() }

// call is one logical request.
type call struct {
	method string
	path   string
	query  url.Values
	body   any
	out    any
	at     string // one attempt at exactly this address: no retries, no redirects, no check
	// resend, when set, is the body of every attempt after the first.
	resend func() any
	// maybeApplied, when set, is called for each attempt that may have
	// been applied without an answer saying so: it was sent (or may have
	// been) and no answer came, or the answer was change_unknown.
	maybeApplied func()
}

// request is cl as the transport sends it, its body not yet encoded.
func (cl call) request() transport.Request {
	return transport.Request{Method: cl.method, Path: cl.path, Query: cl.query, Body: cl.body, MaybeApplied: cl.maybeApplied}
}

// noteMaybe calls cl.maybeApplied, if set.
func (cl call) noteMaybe() {
	if cl.maybeApplied != nil {
		cl.maybeApplied()
	}
}

// do runs a call with failover and retries. It returns nil, an *APIError, an
// error matching ErrUnreachable, or the cause of ctx when ctx ended first.
//
// Every attempt is checked (see checked): one whose node stops answering
// (a SIGSTOPped or cut-off leader) is left after about two WithWaitCheck
// intervals, and that node is passed over for the rest of the call while
// another is left, unless a node names it as the leader.
//
// It retries only where there is hope: a node that timed out or went
// silent, a cluster answering unavailable (an election), a node naming
// the leader, a refusal once some node has answered this client. An
// address whose TLS handshake failed over certificates is passed over for
// the rest of the call; one that, before any node has answered, refused
// the connection or named no host is without hope too; once every address
// is, the call fails at once (a *TLSError, or a *NoServerError).
func (c *Client) do(ctx context.Context, cl call) error {
	req := cl.request()
	if err := c.conns.Encode(&req); err != nil {
		return err
	}
	if cl.at != "" {
		return c.once(ctx, cl.at, cl, req)
	}
	var lastErr error
	backoff := c.backoff
	redirects := 0
	backoffs := 0
	tries := 0
	var silent map[string]bool   // addresses passed over: silent during this call, or without hope
	var hopeless []error         // why each address without hope has none, in the order tried
	var noHopeAt map[string]bool // the addresses in hopeless
	for next, first := 0, true; ; first = false {
		if !first && cl.resend != nil {
			req.Body = cl.resend()
			if err := c.conns.Encode(&req); err != nil {
				return err
			}
		}
		var addr string
		addr, next = c.addrs.PickSkipping(next, silent)
		err := c.checked(ctx, addr, cl, req)
		if err == nil {
			c.addrs.Prefer(addr)
			return nil
		}
		if ctx.Err() != nil {
			return gaveUp(ctx, lastErr)
		}
		if m := c.tlsMismatch(ctx, addr, err); m != nil {
			return m // no retry can help
		}
		var se *silentError
		var te *TLSError
		if errors.As(err, &se) || errors.As(err, &te) {
			if silent == nil {
				silent = map[string]bool{}
			}
			silent[addr] = true
		}
		if c.noHope(err) && !noHopeAt[addr] {
			if noHopeAt == nil {
				noHopeAt = map[string]bool{}
			}
			noHopeAt[addr] = true
			hopeless = append(hopeless, err)
			if len(hopeless) >= c.addrs.Len() {
				return hopelessErr(hopeless)
			}
		}
		var ae *APIError
		if errors.As(err, &ae) && ae.Code == api.CodeChangeUnknown {
			cl.noteMaybe()
		}
		switch {
		case errors.As(err, &ae) && ae.Code == api.CodeNotLeader && ae.Leader != "" && redirects < 3:
			// Follow the named leader at once; it does not use up a retry.
			// A node named as the leader is asked even if it went silent:
			// it may have been stopped for a moment only.
			if u, perr := transport.LeaderURL(addr, ae.Leader); perr == nil && u != addr {
				redirects++
				c.addrs.Prefer(u)
				delete(silent, u)
				next = 0
				lastErr = err
				continue
			}
		case errors.As(err, &ae) && !errors.Is(err, ErrUnavailable):
			return err // an answer: retrying would get the same one
		}
		lastErr = err
		next++
		tries++
		// Try every address once before backing off; the budget counts
		// back-offs, so a cluster with a dead node and an election in
		// progress gets the same time as a single node.
		if tries%c.addrs.Len() == 0 || errors.As(err, &ae) {
			if backoffs >= c.retries {
				return lastErr
			}
			backoffs++
			d := backoff/2 + c.rnd.n(backoff/2+1)
			if !sleep(c.clock, d, ctx.Done()) {
				return gaveUp(ctx, lastErr)
			}
			backoff = min(2*backoff, c.maxBackoff)
		}
	}
}

// noHope reports whether err, an attempt's failure, leaves no hope for
// its address in this call: TLS set up wrong, or, before any node has
// answered this client, no server there.
func (c *Client) noHope(err error) bool {
	var te *TLSError
	return errors.As(err, &te) || !c.answered.Load() && errors.Is(err, ErrUnreachable) && noServerThere(err)
}

// hopelessErr is the error of a call whose every address is without hope
// (errs, one each): the first TLS failure, which names the certificate to
// mend, or else no server.
func hopelessErr(errs []error) error {
	for _, err := range errs {
		var te *TLSError
		if errors.As(err, &te) {
			return te
		}
	}
	return &NoServerError{Errs: errs}
}

// tlsMismatch is the error for an attempt at addr that failed with err
// because one side spoke TLS and the other did not, or nil. A plain
// server met over https:// shows it in the handshake. A TLS server met
// over http:// only closes the connection, which is also what a node that
// dies does: after such a close (EOF, reset), a TLS handshake is tried on
// addr, bounded by ctx and the dial timeout; a server that answers it
// speaks TLS.
func (c *Client) tlsMismatch(ctx context.Context, addr string, err error) error {
	var se *silentError
	if !errors.Is(err, ErrUnreachable) || errors.As(err, &se) {
		return nil
	}
	msg := err.Error()
	if host, ok := strings.CutPrefix(addr, "https://"); ok {
		if strings.Contains(msg, "first record does not look like a TLS handshake") ||
			strings.Contains(msg, "server gave HTTP response to HTTPS client") {
			return &TLSMismatchError{Addr: addr, Host: host}
		}
		return nil
	}
	host, ok := strings.CutPrefix(addr, "http://")
	if !ok || !(strings.HasSuffix(msg, "EOF") || strings.Contains(msg, "connection reset by peer")) {
		return nil
	}
	if !transport.SpeaksTLS(ctx, host) {
		return nil
	}
	return &TLSMismatchError{Addr: addr, Host: host, ServerTLS: true}
}

// silentError is an attempt left because its node stopped answering: no
// answer came, and neither did one to the health check sent meanwhile (or
// the check said the node cannot serve).
type silentError struct {
	addr  string
	check error // what the health check got
}

func (e *silentError) Error() string {
	return fmt.Sprintf("%v: %s stopped answering (its health check: %s)", ErrUnreachable, e.addr, strings.ReplaceAll(e.check.Error(), "fencelock: ", ""))
}

func (e *silentError) Unwrap() error { return ErrUnreachable }

// checked sends cl to addr and, while no answer has come, asks addr every
// waitCheck whether it still answers at all (GET /healthz, bounded by
// waitCheck too: cheap, no quorum round). A node that is frozen or cut off
// cannot answer the call nor say that it will not: the attempt is
// abandoned with a *silentError, and do sends the same request (same
// request_id) to the next node. A write abandoned so may have been
// applied; its request id makes the re-sent one apply at most once, and a
// wait re-sent so finds its queue place on the node that leads next. A
// node that answers but stops leading says so itself: it answers its waits
// not_leader, naming the new leader. Nothing is checked of a call answered
// within waitCheck but a timer armed and stopped.
func (c *Client) checked(ctx context.Context, addr string, cl call, req transport.Request) error {
	actx, cancel := context.WithCancelCause(ctx)
	k := &nodeCheck{c: c, addr: addr, ctx: actx, abandon: cancel}
	k.arm()
	err := c.once(actx, addr, cl, req)
	cause := context.Cause(actx)
	k.stop()
	cancel(nil)
	var se *silentError
	if err != nil && ctx.Err() == nil && errors.As(cause, &se) {
		return se
	}
	return err
}

// nodeCheck is the health check of one attempt's node, running while the
// attempt is out: a timer that, each time it fires, sends one check in a
// goroutine of its own, which arms the timer again if the node answered.
// stop ends it and waits for a check still out.
type nodeCheck struct {
	c       *Client
	addr    string
	ctx     context.Context // the attempt's
	abandon context.CancelCauseFunc

	mu      sync.Mutex
	stopped bool
	timer   Timer
	probe   context.CancelFunc // ends the check that is out
	wg      sync.WaitGroup
}

func (k *nodeCheck) arm() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.stopped {
		k.timer = k.c.clock.AfterFunc(k.c.waitCheck, k.fire)
	}
}

// fire runs on the clock's timer; the check itself must not, because a
// test clock runs timers on the goroutine that moves it.
func (k *nodeCheck) fire() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.stopped {
		return
	}
	pctx, pcancel := context.WithCancelCause(k.ctx)
	k.probe = func() { pcancel(nil) }
	k.wg.Add(1)
	go k.check(pctx, pcancel)
}

func (k *nodeCheck) check(pctx context.Context, pcancel context.CancelCauseFunc) {
	defer k.wg.Done()
	t := k.c.clock.AfterFunc(k.c.waitCheck, func() { pcancel(errors.New("no answer within " + k.c.waitCheck.String())) })
	health := call{method: http.MethodGet, path: api.PathHealth}
	err := k.c.once(pctx, k.addr, health, health.request())
	t.Stop()
	pcancel(nil)
	k.mu.Lock()
	stopped := k.stopped
	k.mu.Unlock()
	switch {
	case stopped || k.ctx.Err() != nil:
	case err != nil:
		k.abandon(&silentError{addr: k.addr, check: err})
	default:
		k.arm()
	}
}

// stop ends the check and waits for a check still out.
func (k *nodeCheck) stop() {
	k.mu.Lock()
	k.stopped = true
	if k.timer != nil {
		k.timer.Stop()
	}
	if k.probe != nil {
		k.probe()
	}
	k.mu.Unlock()
	k.wg.Wait()
}

// gaveUp is the error of a call whose ctx ended while it retried: the
// last failure says why it was retrying (the server unreachable, say), and
// the context's error says why it stopped. Both match with errors.Is.
func gaveUp(ctx context.Context, last error) error {
	if last == nil {
		return ctxErr(ctx)
	}
	return fmt.Errorf("%w (gave up: %w)", last, context.Cause(ctx))
}

func ctxErr(ctx context.Context) error {
	cause := context.Cause(ctx)
	if cause == ctx.Err() {
		return fmt.Errorf("fencelock: %w", cause)
	}
	return cause
}

// once sends cl, its body encoded in req, to addr once, and decodes the
// answer. An attempt that got no answer is ErrUnreachable, or the cause
// of ctx when ctx ended.
func (c *Client) once(ctx context.Context, addr string, cl call, req transport.Request) error {
	a, err := c.conns.RoundTrip(ctx, addr, req)
	var un *transport.Unreached
	var re *transport.RequestError
	switch {
	case err == nil:
		c.answered.Store(true)
		return answer(addr, cl, a)
	case errors.As(err, &un) && ctx.Err() != nil:
		return ctxErr(ctx)
	case errors.As(err, &un):
		if te := tlsProblem(un.Addr, un.Err); te != nil {
			te.HadCert = c.tls != nil && (len(c.tls.Certificates) > 0 || c.tls.GetClientCertificate != nil)
			return te
		}
		return &unreachedError{addr: un.Addr, err: un.Err}
	case errors.As(err, &re):
		return invalidf("addr", "bad request to %s: %v", re.Addr, re.Err)
	}
	return err
}

// answer decodes one answer, however it came.
func answer(addr string, cl call, a transport.Answer) error {
	switch {
	case a.Binary && a.Status/100 == 2:
		if err := transport.DecodeBinary(a.Data, cl.out); err != nil {
			return &APIError{Status: a.Status, Code: api.CodeInternal, Message: fmt.Sprintf("%s answered %s with an unreadable binary answer: %v", addr, cl.path, err)}
		}
		return nil
	case a.Status/100 != 2:
		return decodeError(a.Status, a.Data)
	case cl.out == nil:
		return nil
	}
	if err := json.Unmarshal(a.Data, cl.out); err != nil {
		return &APIError{Status: a.Status, Code: api.CodeInternal, Message: fmt.Sprintf("%s answered %s %s with unreadable JSON: %v", addr, cl.method, cl.path, err)}
	}
	return nil
}

func decodeError(status int, data []byte) error {
	var we api.Error
	if err := json.Unmarshal(data, &we); err != nil || (we.Code == "" && we.Message == "") {
		msg := strings.TrimSpace(string(data))
		if len(msg) > 200 {
			msg = msg[:200] + "…"
		}
		if msg == "" {
			msg = http.StatusText(status)
		}
		return &APIError{Status: status, Message: fmt.Sprintf("HTTP %d: %s", status, msg)}
	}
	ae := &APIError{
		Status:  status,
		Code:    we.Code,
		Message: we.Message,
		Field:   we.Field,
		Holder:  we.Holder,
		Leader:  we.Leader,
		Kind:    we.Kind,
		Permits: we.Permits,
		Quota:   we.Quota,

		CompactRevision: we.CompactRevision,
	}
	if we.RemainingMs != nil {
		ae.Remaining = api.Duration(*we.RemainingMs)
	}
	return ae
}

// Close drops idle HTTP connections and closes framed ones (calls still
// waiting on them fail). The Client stays usable: a later call connects
// again. Close lets a program (or a leak-checking test) end without
// connection goroutines.
func (c *Client) Close() { c.conns.Close() }
