package sim

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fencelock/fencelock/internal/service"
)

// clientNet carries one client process's requests to the nodes: each
// message takes a seeded delay, and while the nemesis says so it is lost,
// duplicated (served twice, the second answer discarded) or its link cut.
// Delays that differ reorder the messages on a link.
type clientNet struct {
	w   *world
	a   *actor
	mu  sync.Mutex
	rnd *rand.Rand
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

func (cn *clientNet) draw() draw {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	r := cn.rnd
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

var errRefused = &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}

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
	n := cn.w.cl.node(strings.TrimSuffix(req.URL.Host, ":7470"))
	if n == nil {
		return nil, errors.New("sim: no such node " + req.URL.Host)
	}
	d := cn.draw()
	// A paused client sends nothing until it runs again.
	if !waitRunning(ctx, cn.a.clk.running()) || !sleepCtx(ctx, d.out) {
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
	if !waitRunning(ctx, running) {
		return nil, ctx.Err()
	}
	serve := func(ctx context.Context) *httptest.ResponseRecorder {
		r2 := req.Clone(ctx)
		r2.Body = io.NopCloser(bytes.NewReader(body))
		r2.RequestURI = req.URL.RequestURI()
		rec := httptest.NewRecorder()
		api.ServeHTTP(rec, r2)
		return rec
	}
	if d.twice {
		time.AfterFunc(d.again, func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			serve(ctx)
		})
	}
	rec := serve(ctx)
	if !sleepCtx(ctx, d.back) {
		return nil, ctx.Err()
	}
	if d.loseAnswer || cn.isCut(n.id) {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if !waitRunning(ctx, cn.a.clk.running()) {
		return nil, ctx.Err()
	}
	res := rec.Result()
	res.Request = req
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

// node is the node named id.
func (c *cluster) node(id string) *simNode {
	for _, n := range c.nodes {
		if n.id == id {
			return n
		}
	}
	return nil
}

// endpoint is what a request arriving now reaches: the incarnation's API,
// whether the node is down, and when it runs.
func (n *simNode) endpoint() (http.Handler, bool, <-chan struct{}) {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	return n.api, n.crashed, n.clk.running()
}

// service is the incarnation's service a peer's call reaches now, whether
// the node is down, and when it runs.
func (n *simNode) service() (*service.Service, bool, <-chan struct{}) {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	return n.svc, n.crashed, n.clk.running()
}
