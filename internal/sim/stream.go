package sim

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/sim/simclock"
	"github.com/fencelock/fencelock/internal/sim/simhttp"
)

// Streamed answers (server-sent events): a request that accepts
// text/event-stream is served by a handler whose writes the world's
// network carries as they come, each chunk after a seeded delay of the
// link's, in order, as a TCP connection would; the stream ends when the
// handler returns, or breaks when the link is cut or the node's process
// is gone. A deliverer goroutine per stream reads the node only when
// time wakes it (a chunk's delay, or a check every streamCheck), never
// woken from inside one of the loop's events.

// streamCheck is how often a quiet stream looks whether its link or
// its node is gone.
const streamCheck = time.Second

// stream serves req from n's incarnation inc (its handler h) as a
// streamed answer; d is the request's draws (its way out is behind it).
func (cn *clientNet) stream(ctx context.Context, req *http.Request, n *simNode, h http.Handler, inc int, d draw) (*http.Response, error) {
	sw := simhttp.NewStreamWriter()
	hctx, hcancel := context.WithCancel(ctx)
	r2 := req.Clone(hctx)
	r2.Body = http.NoBody
	r2.RequestURI = req.URL.RequestURI()
	svc, _, _ := n.service()
	go func() {
		q, p := cn.w.quota, principal(cn.a.i)
		if q == nil || svc == nil {
			h.ServeHTTP(sw, r2)
			sw.Finish()
			return
		}
		qc := q.Begin(n.id, inc, p, req.URL.Path, svc.FSM().AppliedIndex())
		h.ServeHTTP(sw, r2)
		sw.Finish()
		q.End(qc, svc.FSM().AppliedIndex(), sw.Code(), sw.Body())
	}()
	fail := func(err error) (*http.Response, error) {
		hcancel()
		return nil, err
	}
	// The head of the answer: its status and headers, once written.
	for sw.Code() == 0 {
		select {
		case <-sw.More():
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			return fail(ctx.Err())
		}
	}
	if n.incarnation() != inc {
		return fail(errAborted)
	}
	if !simclock.Sleep(ctx, d.back) {
		return fail(ctx.Err())
	}
	if d.loseAnswer || cn.isCut(n.id) {
		<-ctx.Done()
		return fail(ctx.Err())
	}
	if !waitRunning(ctx, cn.a.clk.Running()) {
		return fail(ctx.Err())
	}
	code := sw.Code()
	pr, pw := io.Pipe()
	go cn.deliver(ctx, hcancel, sw, pw, n, inc)
	return &http.Response{StatusCode: code, Status: http.StatusText(code), Header: sw.Header().Clone(), Body: pr, Request: req,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}, nil
}

// deliver carries sw's chunks to pw, each after a delay of the link's,
// until the handler ends, or the link or the node is gone.
func (cn *clientNet) deliver(ctx context.Context, hcancel context.CancelFunc, sw *simhttp.StreamWriter, pw *io.PipeWriter, n *simNode, inc int) {
	defer hcancel()
	gone := func() bool { return n.incarnation() != inc || cn.isCut(n.id) }
	for {
		c, ended := sw.Next()
		switch {
		case c == nil && ended:
			_ = pw.Close()
			return
		case c == nil:
			t := time.NewTimer(streamCheck)
			select {
			case <-sw.More():
			case <-t.C:
			case <-ctx.Done():
			}
			t.Stop()
			// Whichever woke it, what it does next is decided by the
			// state alone.
			if ctx.Err() != nil {
				_ = pw.CloseWithError(ctx.Err())
				return
			}
			if gone() {
				_ = pw.CloseWithError(errAborted)
				return
			}
			continue
		}
		r := cn.w.instants.Draw(fmt.Sprintf("stream%d>%s", cn.a.i, n.id))
		delay := 50*time.Microsecond + time.Duration(r.Int64N(int64(time.Millisecond)))
		if !simclock.Sleep(ctx, delay) || !waitRunning(ctx, cn.a.clk.Running()) {
			_ = pw.CloseWithError(ctx.Err())
			return
		}
		if gone() {
			_ = pw.CloseWithError(errAborted)
			return
		}
		if _, err := pw.Write(c); err != nil {
			return
		}
	}
}

// watchStream starts a's watch of every key over the event stream, after
// after (simhttp.Watcher, in the shape of client.Watch).
func (a *actor) watchStream(ctx context.Context, after api.Revision) *simhttp.Watch {
	wr := &simhttp.Watcher{Client: &http.Client{Transport: a.net}, Addrs: a.addrs,
		Secret: func() string {
			a.w.mu.Lock()
			defer a.w.mu.Unlock()
			return a.secret
		},
		Ended: func(addr string, after api.Revision, err error) {
			a.w.tracef(a.src(), "watch: the stream from %s ended after %v: %v", addr, after, err)
		},
		Undecodable: func(err error, d string) {
			a.w.violate(a.src(), "watch: a streamed event does not decode: %v: %s", err, d)
		}}
	return wr.Watch(ctx, after)
}
