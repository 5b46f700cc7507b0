package clienttest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/callcodec"
	"github.com/fencelock/fencelock/internal/framing"
)

// The front is where faults are injected and arrivals recorded. Each
// transport turns its request into an exchange, and intercept decides
// its fate by the route alone, so that Fail, Delay, NotLeader, Count and
// RequestIDs mean the same on every transport.

// exchange is one request as the front sees it, whichever way it came.
type exchange interface {
	context() context.Context
	// requestID is the request_id of a write ("" for none); false when
	// the request could not be read (its client went away).
	requestID() (string, bool)
	// refuse answers the injected error e.
	refuse(e api.Error)
	// cut ends the connection the request came on, with no answer;
	// with reset, by a TCP reset.
	cut(reset bool)
	// pass hands the request to the server; with lose, the answer is
	// thrown away.
	pass(lose bool)
}

// route names a request by its path: "acquire" for /v1/acquire, "healthz"
// for /healthz.
func route(path string) string {
	return strings.TrimPrefix(strings.TrimPrefix(path, "/v1/"), "/")
}

// intercept records x's arrival at rt by t and applies rt's faults to it.
func (s *Server) intercept(t Transport, rt string, x exchange) {
	s.mu.Lock()
	s.counts[rt]++
	s.via[arrival{t, rt}]++
	fault, delay := s.faults[rt], s.delays[rt]
	s.mu.Unlock()
	if delay > 0 && !s.wait(x.context(), delay) {
		s.abandon(x)
		return
	}
	s.mu.Lock()
	nl := s.notLeader
	s.mu.Unlock()
	if nl != nil {
		x.refuse(api.Error{Message: "not the leader (injected)", Code: api.CodeNotLeader, Leader: *nl})
		return
	}
	switch fault {
	case "", "reset":
	case "hang":
		select {
		case <-x.context().Done():
		case <-s.stop:
		}
		s.abandon(x)
		return
	case "drop":
		x.cut(false)
		return
	default:
		x.refuse(api.Error{Message: "injected " + fault, Code: fault})
		return
	}
	id, ok := x.requestID()
	if !ok {
		return
	}
	if id != "" {
		s.mu.Lock()
		s.ids[rt] = append(s.ids[rt], id)
		s.mu.Unlock()
	}
	x.pass(fault == "reset")
	if fault == "reset" {
		x.cut(true)
	}
}

// abandon ends a request held back (Delay, "hang") whose client gave up
// or whose server is closing. Nobody waits for its answer; a closing
// server ends the connection, as a real one going away would, rather than
// answer.
func (s *Server) abandon(x exchange) {
	select {
	case <-s.stop:
		x.cut(false)
	default:
		x.refuse(api.Error{Message: "abandoned (injected)", Code: api.CodeUnavailable})
	}
}

// wait holds a request for d on the server's clock; false if the client
// or the server went away first.
func (s *Server) wait(ctx context.Context, d time.Duration) bool {
	done := make(chan struct{})
	t := s.clock.AfterFunc(d, func() { close(done) })
	select {
	case <-done:
		return true
	case <-ctx.Done():
	case <-s.stop:
	}
	t.Stop()
	return false
}

// cut closes the connection from remote; with reset, by a TCP RST. It
// reports whether there was one.
func (s *Server) cut(remote string, reset bool) bool {
	s.mu.Lock()
	c := s.conns[remote]
	s.mu.Unlock()
	if c == nil {
		return false
	}
	if tc, ok := c.Conn.(*net.TCPConn); ok && reset {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
	return true
}

// front is the HTTP handler of requests that came by t: HTTP, or JSON on
// a framed connection (whose server hands them over as http.Requests).
func (s *Server) front(t Transport) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.intercept(t, route(r.URL.Path), &httpExchange{s: s, w: w, r: r})
	})
}

type httpExchange struct {
	s *Server
	w http.ResponseWriter
	r *http.Request
}

func (x *httpExchange) context() context.Context { return x.r.Context() }

func (x *httpExchange) requestID() (string, bool) {
	if x.r.Method != http.MethodPost || x.r.Body == nil {
		return "", true
	}
	body, err := io.ReadAll(io.LimitReader(x.r.Body, api.MaxBodyBytes+1))
	if err != nil {
		return "", false
	}
	x.r.Body = io.NopCloser(bytes.NewReader(body))
	var req struct {
		RequestID string `json:"request_id"`
	}
	if json.Unmarshal(body, &req) != nil {
		return "", true
	}
	return req.RequestID, true
}

func (x *httpExchange) refuse(e api.Error) {
	x.w.Header().Set("Content-Type", api.ContentType)
	x.w.WriteHeader(api.Status(e.Code))
	_ = json.NewEncoder(x.w).Encode(e)
}

func (x *httpExchange) cut(reset bool) {
	// An HTTP connection is taken from net/http first, so that it writes
	// nothing more on it; a framed one is the framing server's, which
	// writes only once the handler returns.
	if hj, ok := x.w.(http.Hijacker); ok {
		conn, _, err := hj.Hijack()
		if err != nil {
			return
		}
		if !x.s.cut(x.r.RemoteAddr, reset) {
			conn.Close()
		}
		return
	}
	x.s.cut(x.r.RemoteAddr, reset)
}

func (x *httpExchange) pass(lose bool) {
	if lose {
		x.s.srv.Handler().ServeHTTP(httptest.NewRecorder(), x.r)
		return
	}
	x.s.srv.Handler().ServeHTTP(x.w, x.r)
}

// callFront is the front of the binary calls: next is the server's own
// call handler.
type callFront struct {
	s    *Server
	next framing.CallHandler
}

// callIDs reads the request_id of the binary calls that are writes; a
// call whose request has none is listed with nil.
var callIDs = map[string]func(body []byte) (string, error){
	api.PathAcquire: func(b []byte) (string, error) { q, err := callcodec.Acquire(b); return q.RequestID, err },
	api.PathExtend:  func(b []byte) (string, error) { q, err := callcodec.Extend(b); return q.RequestID, err },
	api.PathRelease: func(b []byte) (string, error) { q, err := callcodec.Release(b); return q.RequestID, err },
	api.PathCheck:   nil,
}

// CallPaths offers the server's binary calls that the front can read; a
// client sends any other as JSON, which the front reads as it reads HTTP.
func (f *callFront) CallPaths() []string {
	var out []string
	for _, p := range f.next.CallPaths() {
		if _, ok := callIDs[p]; ok {
			out = append(out, p)
		}
	}
	return out
}

func (f *callFront) ServeCall(ctx context.Context, from *framing.CallConn, path string, body []byte) (int, []byte) {
	x := &callExchange{f: f, ctx: ctx, from: from, path: path, body: body}
	f.s.intercept(Call, route(path), x)
	return x.status, x.answer
}

type callExchange struct {
	f    *callFront
	ctx  context.Context
	from *framing.CallConn
	path string
	body []byte

	status int
	answer []byte
}

func (x *callExchange) context() context.Context { return x.ctx }

func (x *callExchange) requestID() (string, bool) {
	read := callIDs[x.path]
	if read == nil {
		return "", true
	}
	id, err := read(x.body)
	if err != nil {
		return "", true // the server refuses it as it would any bad body
	}
	return id, true
}

func (x *callExchange) refuse(e api.Error) {
	b, _ := json.Marshal(e)
	x.status, x.answer = api.Status(e.Code), append(b, '\n')
}

func (x *callExchange) cut(reset bool) {
	x.f.s.cut(x.from.Remote, reset)
	x.status, x.answer = http.StatusServiceUnavailable, nil // never written: the connection is gone
}

func (x *callExchange) pass(lose bool) {
	status, answer := x.f.next.ServeCall(x.ctx, x.from, x.path, x.body)
	if !lose {
		x.status, x.answer = status, answer
	}
}

// trackingListener records every connection it accepts by its remote
// address, which is how a request (HTTP, framed or a call) names its
// connection, so that the front can cut the one a request came on.
type trackingListener struct {
	net.Listener
	s *Server
}

func (l *trackingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: c, s: l.s, remote: c.RemoteAddr().String()}
	l.s.mu.Lock()
	l.s.conns[tc.remote] = tc
	l.s.mu.Unlock()
	return tc, nil
}

type trackedConn struct {
	net.Conn
	s      *Server
	remote string
}

func (c *trackedConn) Close() error {
	c.s.mu.Lock()
	if c.s.conns[c.remote] == c {
		delete(c.s.conns, c.remote)
	}
	c.s.mu.Unlock()
	return c.Conn.Close()
}
