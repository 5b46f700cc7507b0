package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/framing"
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
	rnd        random // jitter, back-off and request ids (WithRandom)

	mu    sync.Mutex
	addrs []string // base URLs, no trailing slash
	cur   int      // the address that answered last (the leader, in a cluster)

	frames    framing.Pool // by host:port of http:// addresses
	tlsFrames framing.Pool // by host:port of https:// addresses
	tls       *tls.Config  // for https:// addresses; nil: Go's defaults
	optErr    error        // an option that could not be applied
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
// most once.
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
		frames:     framing.Pool{DialTimeout: dialTimeout},
	}
	c.tlsFrames = framing.Pool{DialTimeout: dialTimeout, Dial: c.tlsDial}
	for _, o := range opts {
		o(c)
	}
	if c.optErr != nil {
		return nil, c.optErr
	}
	if c.auth.token != "" {
		// Every framed connection sends the token once, first (an
		// HTTP request carries it in each Authorization header).
		c.frames.Auth = "Bearer " + c.auth.token
		c.tlsFrames.Auth = c.frames.Auth
	}
	for _, a := range addrs {
		for _, one := range strings.Split(a, ",") {
			one = strings.TrimSpace(one)
			if one == "" {
				continue
			}
			u, err := baseURL(one, c.defaultScheme())
			if err != nil {
				return nil, err
			}
			c.addrs = append(c.addrs, u)
		}
	}
	if len(c.addrs) == 0 {
		return nil, invalidf("addr", "no server address given")
	}
	if c.hc == nil {
		c.hc = &http.Client{Transport: &http.Transport{
			Proxy:               nil, // a lock server is never reached through a proxy by surprise
			DialContext:         (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			TLSHandshakeTimeout: 5 * time.Second,
			MaxIdleConnsPerHost: 16,
			IdleConnTimeout:     90 * time.Second,
			TLSClientConfig:     c.tls,
		}}
	}
	return c, nil
}

// baseURL is addr as a base URL; an address without a scheme gets scheme.
func baseURL(addr, scheme string) (string, error) {
	if !strings.Contains(addr, "://") {
		addr = scheme + "://" + addr
	}
	u, err := url.Parse(addr)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return "", invalidf("addr", "bad server address %q", addr)
	}
	return strings.TrimRight(u.Scheme+"://"+u.Host+u.Path, "/"), nil
}

// Addrs returns the server base URLs, the preferred one first.
func (c *Client) Addrs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, 0, len(c.addrs))
	for i := range c.addrs {
		out = append(out, c.addrs[(c.cur+i)%len(c.addrs)])
	}
	return out
}

// pick returns the preferred address, or the one n places after it.
func (c *Client) pick(n int) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.addrs[(c.cur+n)%len(c.addrs)]
}

// prefer makes addr the first one tried, adding it when it is a leader we
// had not been told about.
func (c *Client) prefer(addr string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, a := range c.addrs {
		if a == addr {
			c.cur = i
			return
		}
	}
	c.addrs = append(c.addrs, addr)
	c.cur = len(c.addrs) - 1
}

// size returns how many addresses the client knows.
func (c *Client) size() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.addrs)
}

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
	// bin is body in the binary encoding of framed calls (binaryBody),
	// set by do when the call is one of them; the JSON body is then made
	// only if a connection that takes it in binary is not at hand.
	bin []byte
}

// jsonBody is body, or cl.body as JSON when body has not been made yet.
func jsonBody(cl call, body []byte) ([]byte, error) {
	if body != nil || cl.body == nil {
		return body, nil
	}
	b, err := json.Marshal(cl.body)
	if err != nil {
		return nil, &encodeError{err}
	}
	return b, nil
}

// encodeError is a request that could not be encoded: nothing was sent.
type encodeError struct{ err error }

func (e *encodeError) Error() string { return "fencelock: encoding request: " + e.err.Error() }
func (e *encodeError) Unwrap() error { return e.err }

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
func (c *Client) do(ctx context.Context, cl call) error {
	body, err := c.encode(&cl)
	if err != nil {
		return err
	}
	if cl.at != "" {
		return c.once(ctx, cl.at, cl, body)
	}
	var lastErr error
	backoff := c.backoff
	redirects := 0
	backoffs := 0
	tries := 0
	var silent map[string]bool // addresses that went silent during this call
	for next, first := 0, true; ; first = false {
		if !first && cl.resend != nil {
			cl.body = cl.resend()
			if body, err = c.encode(&cl); err != nil {
				return err
			}
		}
		var addr string
		addr, next = c.pickSkipping(next, silent)
		err := c.checked(ctx, addr, cl, body)
		if err == nil {
			c.prefer(addr)
			return nil
		}
		if ctx.Err() != nil {
			return gaveUp(ctx, lastErr)
		}
		if m := c.tlsMismatch(ctx, addr, err); m != nil {
			return m // no retry can help
		}
		var se *silentError
		if errors.As(err, &se) {
			if silent == nil {
				silent = map[string]bool{}
			}
			silent[addr] = true
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
			if u, perr := leaderURL(addr, ae.Leader); perr == nil && u != addr {
				redirects++
				c.prefer(u)
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
		if tries%c.size() == 0 || errors.As(err, &ae) {
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

// encode makes cl's body: in binary for a framed call that has a binary
// form (cl.bin), else the JSON returned.
func (c *Client) encode(cl *call) ([]byte, error) {
	cl.bin = nil
	if c.framed {
		cl.bin = binaryBody(*cl)
	}
	if cl.body == nil || cl.bin != nil {
		return nil, nil
	}
	return jsonBody(*cl, nil)
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
	pctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: dialTimeout},
		// Only whether it speaks TLS is asked, not whom: nothing is sent.
		Config: &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}}
	conn, herr := d.DialContext(pctx, "tcp", host)
	var alert tls.AlertError
	switch {
	case herr == nil:
		conn.Close()
	case errors.As(herr, &alert):
		// It answered the handshake, if only to refuse it.
	default:
		return nil
	}
	return &TLSMismatchError{Addr: addr, Host: host, ServerTLS: true}
}

// pickSkipping is the address n places after the preferred one, passing
// over those in skip while another is left, and the place it was found at.
func (c *Client) pickSkipping(n int, skip map[string]bool) (string, int) {
	if len(skip) > 0 {
		for i := range c.size() {
			if a := c.pick(n + i); !skip[a] {
				return a, n + i
			}
		}
	}
	return c.pick(n), n
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
func (c *Client) checked(ctx context.Context, addr string, cl call, body []byte) error {
	actx, cancel := context.WithCancelCause(ctx)
	k := &nodeCheck{c: c, addr: addr, ctx: actx, abandon: cancel}
	k.arm()
	err := c.once(actx, addr, cl, body)
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
	err := k.c.once(pctx, k.addr, call{method: http.MethodGet, path: api.PathHealth}, nil)
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

// maxAnswer bounds what is read of one answer (a list of 1000 leases with
// maximal keys is about 1.3 MiB).
const maxAnswer = 8 << 20

func (c *Client) once(ctx context.Context, addr string, cl call, body []byte) error {
	if c.framed && (strings.HasPrefix(addr, "http://") || strings.HasPrefix(addr, "https://")) {
		fc, err := c.frameConn(ctx, addr, cl.path)
		if err != nil {
			return err
		}
		if fc != nil {
			return c.onceFramed(ctx, fc, addr, cl, body)
		}
	}
	body, err := jsonBody(cl, body)
	if err != nil {
		return err
	}
	return c.onceHTTP(ctx, addr, cl, body)
}

// maxRoomTries bounds how often a call looks for a framed connection with
// room before it waits on a full one.
const maxRoomTries = 8

// dialTimeout bounds connecting to one server.
const dialTimeout = 2 * time.Second

// frameConn returns a framed connection to addr (an http:// or https://
// base URL) with room for a request to path, or nil when that server
// speaks only HTTP. Extends and releases have a budget of their own on
// every connection; other requests past a connection's window go to
// another one (framing.Pool), so thousands of waits cannot hold up an
// extend.
func (c *Client) frameConn(ctx context.Context, addr, path string) (*framing.Conn, error) {
	pool, host := &c.frames, strings.TrimPrefix(addr, "http://")
	if h, ok := strings.CutPrefix(addr, "https://"); ok {
		pool, host = &c.tlsFrames, h
	}
	fc, err := pool.GetFor(ctx, host, path)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctxErr(ctx)
		}
		return nil, unreachable(addr, err)
	}
	return fc, nil
}

func (c *Client) onceFramed(ctx context.Context, fc *framing.Conn, addr string, cl call, body []byte) error {
	target := cl.path
	if len(cl.query) > 0 {
		target += "?" + cl.query.Encode()
	}
	// send is one try on fc: in binary when fc's server takes this call
	// so, else as JSON (made the first time it is needed).
	var binary bool
	send := func(fc *framing.Conn, wait bool) (int, []byte, error) {
		binary = cl.bin != nil && fc.Calls(cl.path)
		if binary {
			if wait {
				return fc.RoundTrip(ctx, framing.MethodCall, cl.path, cl.bin)
			}
			return fc.TryRoundTrip(ctx, framing.MethodCall, cl.path, cl.bin)
		}
		var err error
		if body, err = jsonBody(cl, body); err != nil {
			return 0, nil, err
		}
		if wait {
			return fc.RoundTrip(ctx, cl.method, target, body)
		}
		return fc.TryRoundTrip(ctx, cl.method, target, body)
	}
	// The pool picked fc for its room, but other calls may have taken it
	// since: try again (the pool then dials another connection, up to
	// its limit) rather than wait on a window that long waits may hold
	// for good. Only when every connection stays full, wait.
	status, data, err := send(fc, false)
	for tries := 0; errors.Is(err, framing.ErrNoRoom); tries++ {
		if tries == maxRoomTries {
			status, data, err = send(fc, true)
			break
		}
		if fc, err = c.frameConn(ctx, addr, cl.path); err != nil {
			return err
		}
		if fc == nil {
			if body, err = jsonBody(cl, body); err != nil {
				return err
			}
			return c.onceHTTP(ctx, addr, cl, body)
		}
		status, data, err = send(fc, false)
	}
	if err != nil {
		var ee *encodeError
		if errors.As(err, &ee) {
			return err
		}
		cl.noteMaybe()
		if ctx.Err() != nil {
			return ctxErr(ctx)
		}
		return fmt.Errorf("%w: %s: %v", ErrUnreachable, addr, err)
	}
	if binary && status/100 == 2 {
		return binaryAnswer(addr, cl, status, data)
	}
	return answer(addr, cl, status, data)
}

func (c *Client) onceHTTP(ctx context.Context, addr string, cl call, body []byte) error {
	u := addr + cl.path
	if len(cl.query) > 0 {
		u += "?" + cl.query.Encode()
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	// A request may have reached the server once it had a connection;
	// before, it surely did not.
	var connected atomic.Bool
	if cl.maybeApplied != nil {
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) { connected.Store(true) }})
	}
	req, err := http.NewRequestWithContext(ctx, cl.method, u, rd)
	if err != nil {
		return invalidf("addr", "bad request to %s: %v", addr, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", api.ContentType)
	}
	req.Header.Set("Accept", api.ContentType)
	if c.auth.token != "" {
		req.Header.Set(api.HeaderAuthorization, "Bearer "+c.auth.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if connected.Load() {
			cl.noteMaybe()
		}
		if ctx.Err() != nil {
			return ctxErr(ctx)
		}
		return unreachable(addr, unwrapURLError(err))
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		cl.noteMaybe()
		if ctx.Err() != nil {
			return ctxErr(ctx)
		}
		return fmt.Errorf("%w: %s: reading answer: %v", ErrUnreachable, addr, err)
	}
	return answer(addr, cl, resp.StatusCode, data)
}

// answer decodes one answer, however it came.
func answer(addr string, cl call, status int, data []byte) error {
	if status/100 != 2 {
		return decodeError(status, data)
	}
	if cl.out == nil {
		return nil
	}
	if err := json.Unmarshal(data, cl.out); err != nil {
		return &APIError{Status: status, Code: api.CodeInternal, Message: fmt.Sprintf("%s answered %s %s with unreadable JSON: %v", addr, cl.method, cl.path, err)}
	}
	return nil
}

func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
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
func (c *Client) Close() {
	c.hc.CloseIdleConnections()
	c.frames.Close()
	c.tlsFrames.Close()
}

// errDown is ErrUnreachable for a node where nothing listens (the
// connection was refused): it is down, and its answer says nothing of
// the other nodes (the keep-alive's rounds count on that).
var errDown = fmt.Errorf("%w", ErrUnreachable)

// unreachable is the error of a call to addr that could not reach it.
func unreachable(addr string, err error) error {
	kind := ErrUnreachable
	if errors.Is(err, syscall.ECONNREFUSED) {
		kind = errDown
	}
	return fmt.Errorf("%w: %s: %v", kind, addr, err)
}
