package framing

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// ErrNotFramed: the server answered the preface with something else — a
// server that speaks only HTTP. The caller can use HTTP instead.
var ErrNotFramed = errors.New("framing: the server does not speak the frame protocol")

// ErrRefused: the server answered the preface 503 — at its connection cap,
// in total or for this client's address. It does speak frames; try later.
var ErrRefused = errors.New("framing: the server refused the connection")

// ErrConnClosed: the connection failed or was closed while a request was
// unanswered. The request may or may not have been carried out.
var ErrConnClosed = errors.New("framing: connection closed")

// Conn is the client end of one framed connection. It is safe for
// concurrent use: every RoundTrip shares the connection.
type Conn struct {
	c net.Conn

	bw batchWriter

	// One token per request out whose answer has not come: window for
	// most requests, priority for extends and releases (Priority). They
	// mirror the server's budgets (DefaultMaxInFlight,
	// DefaultMaxPriorityInFlight), so a request over them waits here, where
	// it holds up nothing else, rather than stall the server's reading of
	// this connection, which would hold up the extends behind it.
	window, priority chan struct{}

	// calls are the paths the server answers as binary calls, once its
	// answer to CallsTarget has come; until then, none.
	calls     atomic.Pointer[map[string]bool]
	learnOnce sync.Once
	learnt    chan struct{} // closed once calls is set

	mu      sync.Mutex
	next    uint32
	pending map[uint32]*call
	err     error         // why the connection ended
	dead    chan struct{} // closed when the connection ended
}

// call is one request out. One whose caller's ctx ended stays until its
// answer comes (into ch's buffer, read by no one), because the server
// counts it until then.
type call struct {
	ch     chan answer
	tokens chan struct{}
}

// Dial connects to addr (host:port), sends the preface and waits for its
// echo, all within ctx.
func Dial(ctx context.Context, addr string) (*Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return Start(ctx, c)
}

// Start sends the preface on c, a connection just made (a *tls.Conn, say),
// and waits for its echo within ctx. It closes c if that fails.
func Start(ctx context.Context, c net.Conn) (*Conn, error) {
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Now()) })
	br := bufio.NewReaderSize(c, 16<<10)
	err := handshake(c, br)
	if !stop() && err == nil {
		err = ctx.Err()
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	c.SetDeadline(time.Time{})
	fc := &Conn{c: c, pending: make(map[uint32]*call), dead: make(chan struct{}), learnt: make(chan struct{}),
		window:   make(chan struct{}, DefaultMaxInFlight),
		priority: make(chan struct{}, DefaultMaxPriorityInFlight),
	}
	fc.bw.w = c
	go fc.readLoop(br)
	// Ask which calls the server takes in binary. The answer comes as
	// id 0, which no other request uses; until it does, every call goes
	// as JSON, so a server that never answers costs nothing but that.
	if err := fc.write(0, KindRequest, methodGet, CallsTarget, nil); err != nil {
		return nil, err
	}
	return fc, nil
}

// Calls reports whether the server answers path as a binary call
// (MethodCall), as it said when the connection began.
func (c *Conn) Calls(path string) bool {
	m := c.calls.Load()
	return m != nil && (*m)[path]
}

// CallsKnown is closed once the server has said which calls it takes in
// binary; until then Calls reports none.
func (c *Conn) CallsKnown() <-chan struct{} { return c.learnt }

// learnCalls takes the server's answer to CallsTarget (the first: a
// server has no reason to send another).
func (c *Conn) learnCalls(a answer) {
	c.learnOnce.Do(func() {
		m := make(map[string]bool)
		if a.status == 200 {
			for _, p := range strings.Split(string(a.body), "\n") {
				if strings.HasPrefix(p, "/") {
					m[p] = true
				}
			}
		}
		c.calls.Store(&m)
		close(c.learnt)
	})
}

func handshake(c net.Conn, br *bufio.Reader) error {
	if _, err := c.Write([]byte(Preface)); err != nil {
		return err
	}
	var p [len(Preface)]byte
	n, err := io.ReadFull(br, p[:])
	if string(p[:n]) == Preface {
		return nil
	}
	if n > 0 && p[0] != Preface[0] {
		if string(p[:n]) == "HTTP/1.1" {
			// The connection limiter answers 503 before anything else
			// (internal/server): that is a busy server, not an HTTP one.
			line, _ := br.ReadString('\n')
			if strings.HasPrefix(line, " 503 ") {
				return fmt.Errorf("%w: HTTP/1.1%s", ErrRefused, strings.TrimRight(line, "\r\n"))
			}
		}
		return ErrNotFramed
	}
	if err == nil {
		return ErrNotFramed
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		// Closed before a word of HTTP (an HTTP server answers a request
		// it cannot parse with 400, above), or halfway through the echo:
		// a server going down, or a proxy whose node is down. Taken for
		// an HTTP-only server, the address would be spoken to in HTTP
		// for good (Pool); it is unreachable for now.
		return fmt.Errorf("%w before answering the preface: %w", ErrConnClosed, err)
	}
	return err
}

// RoundTrip sends one request and waits for its answer. method is GET or
// POST; target is a path with an optional ?query. When ctx ends first, the
// server is told to cancel the request and RoundTrip returns ctx's error.
func (c *Conn) RoundTrip(ctx context.Context, method, target string, body []byte) (status int, answerBody []byte, err error) {
	return c.roundTrip(ctx, method, target, body, true)
}

// ErrNoRoom is TryRoundTrip's answer when the request's budget on the
// connection is full; nothing was sent.
var ErrNoRoom = errors.New("framing: no room for another request on this connection")

// TryRoundTrip is RoundTrip, except that when the request's budget is full
// it sends nothing and returns ErrNoRoom at once instead of waiting for an
// answer to free a place (which, on a connection full of long waits, may
// never come): the caller can try another connection.
func (c *Conn) TryRoundTrip(ctx context.Context, method, target string, body []byte) (status int, answerBody []byte, err error) {
	return c.roundTrip(ctx, method, target, body, false)
}

func (c *Conn) roundTrip(ctx context.Context, method, target string, body []byte, wait bool) (status int, answerBody []byte, err error) {
	mc, err := methodCode(method)
	if err != nil {
		return 0, nil, err
	}
	tokens := c.window
	if Priority(target) {
		tokens = c.priority
	}
	if wait {
		select {
		case tokens <- struct{}{}:
		case <-c.dead:
			return 0, nil, c.Err()
		case <-ctx.Done():
			return 0, nil, ctx.Err()
		}
	} else {
		select {
		case tokens <- struct{}{}:
		case <-c.dead:
			return 0, nil, c.Err()
		case <-ctx.Done():
			return 0, nil, ctx.Err()
		default:
			return 0, nil, ErrNoRoom
		}
	}
	cl := &call{ch: make(chan answer, 1), tokens: tokens}
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		<-tokens
		return 0, nil, err
	}
	c.next++
	id := c.next
	c.pending[id] = cl
	c.mu.Unlock()

	if err := c.write(id, KindRequest, mc, target, body); err != nil {
		c.forget(id)
		return 0, nil, err
	}
	select {
	case a := <-cl.ch:
		return a.status, a.body, nil
	case <-c.dead:
		select {
		case a := <-cl.ch: // answered just before the end
			return a.status, a.body, nil
		default:
		}
		c.mu.Lock()
		err := c.err
		c.mu.Unlock()
		return 0, nil, err
	case <-ctx.Done():
		// Tell the server; a failure here means the connection is gone,
		// which cancels the request anyway.
		_ = c.write(id, KindCancel, 0, "", nil)
		return 0, nil, ctx.Err()
	}
}

// forget drops a request that was never sent, with its token.
func (c *Conn) forget(id uint32) {
	c.mu.Lock()
	cl, ok := c.pending[id]
	delete(c.pending, id)
	c.mu.Unlock()
	if ok {
		<-cl.tokens
	}
}

// Room reports whether a request for target would go out at once rather
// than wait for an answer to free its budget.
func (c *Conn) Room(target string) bool {
	tokens := c.window
	if Priority(target) {
		tokens = c.priority
	}
	return len(tokens) < cap(tokens)
}

// Authorize makes every later request on c carry credential (an
// Authorization header value, e.g. "Bearer flk_…"), as an HTTP client
// sends it with each request. The server answers nothing to it.
func (c *Conn) Authorize(credential string) error {
	if credential == "" || len(credential) > maxCredential {
		return fmt.Errorf("framing: a credential is 1 to %d bytes", maxCredential)
	}
	return c.write(0, KindAuth, 0, "", []byte(credential))
}

// load is how many ordinary requests are out, to pick the least busy.
func (c *Conn) load() int { return len(c.window) }

func (c *Conn) write(id uint32, kind, method byte, target string, body []byte) error {
	if err := checkRequest(target, body); err != nil {
		return err
	}
	err := c.bw.write(frameTag{}, outFrame{id: id, kind: kind, method: method, target: target, body: body})
	if err != nil {
		c.fail(fmt.Errorf("%w: %v", ErrConnClosed, err))
		return c.Err()
	}
	return nil
}

func (c *Conn) readLoop(br *bufio.Reader) {
	for {
		a, err := readAnswer(br)
		if err != nil {
			c.fail(fmt.Errorf("%w: %v", ErrConnClosed, err))
			return
		}
		if a.id == 0 {
			c.learnCalls(a)
			continue
		}
		c.mu.Lock()
		cl, ok := c.pending[a.id]
		delete(c.pending, a.id)
		c.mu.Unlock()
		if ok {
			<-cl.tokens
			cl.ch <- a
		}
	}
}

// fail ends the connection with err (the first reason wins).
func (c *Conn) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return
	}
	c.err = err
	c.pending = nil
	close(c.dead)
	c.c.Close()
}

// Err is why the connection ended, or nil while it is usable.
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Done is closed when the connection has ended.
func (c *Conn) Done() <-chan struct{} { return c.dead }

// Close ends the connection; unanswered requests fail with ErrConnClosed.
func (c *Conn) Close() error {
	c.fail(fmt.Errorf("%w: closed by the client", ErrConnClosed))
	return nil
}
