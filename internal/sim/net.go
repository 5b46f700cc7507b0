package sim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"syscall"
	"time"

	"github.com/fencelock/fencelock/internal/service"
	"github.com/fencelock/fencelock/internal/sim/simclock"
	"github.com/fencelock/fencelock/internal/sim/simhttp"
)

// clientNet carries one client process's requests to the nodes: each
// message takes a seeded delay, and while the nemesis says so it is lost,
// duplicated (served twice, the second answer discarded) or its link cut.
// Delays that differ reorder the messages on a link. Each request's draws
// are keyed by the link and the request's number on it.
type clientNet struct {
	w  *world
	a  *actor
	mu sync.Mutex
	// faults, set by the nemesis
	drop float64         // probability a request or an answer is lost
	dup  float64         // probability a request is delivered twice
	cut  map[string]bool // node id -> no messages pass
}

type draw struct {
	out, back, again time.Duration
	lose, loseAnswer bool
	twice            bool
}

func (cn *clientNet) draw(node, path string) draw {
	r := cn.w.instants.Draw(fmt.Sprintf("client%d>%s%s", cn.a.i, node, path))
	cn.mu.Lock()
	defer cn.mu.Unlock()
	delay := func() time.Duration {
		if r.IntN(40) == 0 {
			return 5*time.Millisecond + time.Duration(r.Int64N(int64(45*time.Millisecond)))
		}
		return 50*time.Microsecond + time.Duration(r.Int64N(int64(time.Millisecond)))
	}
	return draw{out: delay(), back: delay(), again: delay() + time.Duration(r.Int64N(int64(20*time.Millisecond))),
		lose: r.Float64() < cn.drop, loseAnswer: r.Float64() < cn.drop, twice: r.Float64() < cn.dup}
}

func (cn *clientNet) isCut(id string) bool {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	return cn.cut[id]
}

var (
	errRefused = &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	// errAborted ends a request whose server process died under it. (A
	// real one would see a reset, on which the client dials the address
	// to ask whether it speaks TLS: no such dial reaches a world.)
	errAborted = &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNABORTED}
)

// incarnation is n's running incarnation; 0 when it is down.
func (n *simNode) incarnation() int {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	if n.down {
		return 0
	}
	return n.inc
}

// RoundTrip delivers req to the node its host names and brings back the
// answer, through the world's faults.
func (cn *clientNet) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	var body []byte
	if req.Body != nil {
		b, err := io.ReadAll(req.Body)
		_ = req.Body.Close()
		if err != nil {
			return nil, err
		}
		body = b
	}
	sent := time.Now()
	n := cn.w.cl.reach(req.URL.Host)
	if n == nil {
		return nil, errors.New("sim: no such node " + req.URL.Host)
	}
	d := cn.draw(n.id, req.URL.Path)
	if cn.w.debug {
		cn.w.tracef(cn.a.src(), "%s > %s %s %s (out %s)", cn.a.src(), n.id, req.Method, req.URL.Path, d.out)
	}
	// A paused client sends nothing until it runs again.
	if !waitRunning(ctx, cn.a.clk.Running()) || !simclock.Sleep(ctx, d.out) {
		return nil, ctx.Err()
	}
	if d.lose || cn.isCut(n.id) {
		<-ctx.Done() // no answer ever comes
		return nil, ctx.Err()
	}
	api, crashed, running := n.endpoint()
	if crashed {
		return nil, errRefused
	}
	svc, _, _ := n.service()
	inc := n.incarnation()
	if !waitRunning(ctx, running) {
		return nil, ctx.Err()
	}
	if simhttp.WantsStream(req) {
		return cn.stream(ctx, req, n, api, inc, d)
	}
	serve := func(ctx context.Context) *httptest.ResponseRecorder {
		r2 := req.Clone(ctx)
		r2.Body = io.NopCloser(bytes.NewReader(body))
		r2.RequestURI = req.URL.RequestURI()
		rec := httptest.NewRecorder()
		q, p := cn.w.quota, principal(cn.a.i)
		if q == nil || svc == nil {
			api.ServeHTTP(rec, r2)
			return rec
		}
		qc := q.Begin(n.id, inc, p, req.URL.Path, svc.FSM().AppliedIndex())
		api.ServeHTTP(rec, r2)
		q.End(qc, svc.FSM().AppliedIndex(), rec.Code, rec.Body.Bytes())
		return rec
	}
	if d.twice {
		time.AfterFunc(d.again, func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			serve(ctx)
		})
	}
	// The server works on its own goroutine: a caller that gives up is
	// answered its context's error at once, as an HTTP client that
	// drops the connection is, whatever the handler is waiting on.
	served := make(chan *httptest.ResponseRecorder, 1)
	go func() { served <- serve(ctx) }()
	var rec *httptest.ResponseRecorder
	select {
	case rec = <-served:
	case <-ctx.Done():
		select {
		case rec = <-served: // both at once: the answer came
		default:
			return nil, ctx.Err()
		}
	}
	if n.incarnation() != inc {
		return nil, errAborted // the process that took it is gone
	}
	if cn.w.cfg.ACL && cn.a.i < cn.w.cfg.Clients {
		cn.w.acl.Check(cn.a.src(), cn.a.i, simhttp.Bearer(req), req.URL.Path, sent, rec.Code)
	}
	if !simclock.Sleep(ctx, d.back) {
		return nil, ctx.Err()
	}
	if d.loseAnswer || cn.isCut(n.id) {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if !waitRunning(ctx, cn.a.clk.Running()) {
		return nil, ctx.Err()
	}
	res := rec.Result()
	res.Request = req
	if cn.w.debug {
		cn.w.tracef(cn.a.src(), "%s < %s %d %s", cn.a.src(), n.id, res.StatusCode, req.URL.Path)
	}
	return res, nil
}

func waitRunning(ctx context.Context, running <-chan struct{}) bool {
	select {
	case <-running:
		return true
	case <-ctx.Done():
		return false
	}
}

// endpoint is what a request arriving now reaches: the incarnation's API,
// whether the node is down, and when it runs.
func (n *simNode) endpoint() (http.Handler, bool, <-chan struct{}) {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	return n.api, n.down, n.clk.Running()
}

// service is the incarnation's service a peer's call reaches now, whether
// the node is down, and when it runs.
func (n *simNode) service() (*service.Service, bool, <-chan struct{}) {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	return n.svc, n.down, n.clk.Running()
}
