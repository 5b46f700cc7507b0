package sim

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/client"
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

// streamWriter is a handler's side of a streamed answer: its writes are
// queued, never blocking the handler.
type streamWriter struct {
	h      http.Header
	mu     sync.Mutex
	code   int
	chunks [][]byte
	ended  bool
	more   chan struct{} // poked on every change (capacity 1)
}

func newStreamWriter() *streamWriter {
	return &streamWriter{h: http.Header{}, more: make(chan struct{}, 1)}
}

func (s *streamWriter) poke() {
	select {
	case s.more <- struct{}{}:
	default:
	}
}

func (s *streamWriter) Header() http.Header { return s.h }

func (s *streamWriter) WriteHeader(code int) {
	s.mu.Lock()
	if s.code == 0 {
		s.code = code
	}
	s.mu.Unlock()
	s.poke()
}

func (s *streamWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	if s.code == 0 {
		s.code = http.StatusOK
	}
	s.chunks = append(s.chunks, append([]byte(nil), b...))
	s.mu.Unlock()
	s.poke()
	return len(b), nil
}

func (s *streamWriter) Flush() {}

// finish is the handler's return.
func (s *streamWriter) finish() {
	s.mu.Lock()
	s.ended = true
	if s.code == 0 {
		s.code = http.StatusOK
	}
	s.mu.Unlock()
	s.poke()
}

// body is what the handler wrote so far (an error answer, once ended).
func (s *streamWriter) body() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b []byte
	for _, c := range s.chunks {
		b = append(b, c...)
	}
	return b
}

// wantsStream says whether req asks for server-sent events.
func wantsStream(req *http.Request) bool {
	return strings.Contains(req.Header.Get("Accept"), api.ContentTypeEventStream)
}

// stream serves req from n's incarnation inc (its handler h) as a
// streamed answer; d is the request's draws (its way out is behind it).
func (cn *clientNet) stream(ctx context.Context, req *http.Request, n *simNode, h http.Handler, inc int, d draw) (*http.Response, error) {
	sw := newStreamWriter()
	hctx, hcancel := context.WithCancel(ctx)
	r2 := req.Clone(hctx)
	r2.Body = http.NoBody
	r2.RequestURI = req.URL.RequestURI()
	svc, _, _ := n.service()
	go func() {
		q, p := cn.w.quota, principal(cn.a.i)
		if q == nil || svc == nil {
			h.ServeHTTP(sw, r2)
			sw.finish()
			return
		}
		qc, key := q.begin(n, inc, p, req.URL.Path, svc)
		h.ServeHTTP(sw, r2)
		sw.finish()
		sw.mu.Lock()
		code := sw.code
		sw.mu.Unlock()
		q.end(cn.w, qc, key, p, svc, code, sw.body())
	}()
	fail := func(err error) (*http.Response, error) {
		hcancel()
		return nil, err
	}
	// The head of the answer: its status and headers, once written.
	for {
		sw.mu.Lock()
		code := sw.code
		sw.mu.Unlock()
		if code != 0 {
			break
		}
		select {
		case <-sw.more:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			return fail(ctx.Err())
		}
	}
	if n.incarnation() != inc {
		return fail(errAborted)
	}
	if !sleepCtx(ctx, d.back) {
		return fail(ctx.Err())
	}
	if d.loseAnswer || cn.isCut(n.id) {
		<-ctx.Done()
		return fail(ctx.Err())
	}
	if !waitRunning(ctx, cn.a.clk.Running()) {
		return fail(ctx.Err())
	}
	sw.mu.Lock()
	code := sw.code
	sw.mu.Unlock()
	pr, pw := io.Pipe()
	go cn.deliver(ctx, hcancel, sw, pw, n, inc)
	return &http.Response{StatusCode: code, Status: http.StatusText(code), Header: sw.h.Clone(), Body: pr, Request: req,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}, nil
}

// deliver carries sw's chunks to pw, each after a delay of the link's,
// until the handler ends, or the link or the node is gone.
func (cn *clientNet) deliver(ctx context.Context, hcancel context.CancelFunc, sw *streamWriter, pw *io.PipeWriter, n *simNode, inc int) {
	defer hcancel()
	gone := func() bool { return n.incarnation() != inc || cn.isCut(n.id) }
	for {
		sw.mu.Lock()
		var c []byte
		ended := sw.ended && len(sw.chunks) == 0
		if len(sw.chunks) > 0 {
			c, sw.chunks = sw.chunks[0], sw.chunks[1:]
		}
		sw.mu.Unlock()
		switch {
		case c == nil && ended:
			_ = pw.Close()
			return
		case c == nil:
			t := time.NewTimer(streamCheck)
			select {
			case <-sw.more:
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
		r := cn.w.instantDraw(fmt.Sprintf("stream%d>%s", cn.a.i, n.id))
		delay := 50*time.Microsecond + time.Duration(r.Int64N(int64(time.Millisecond)))
		if !sleepCtx(ctx, delay) || !waitRunning(ctx, cn.a.clk.Running()) {
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

// sseWatch is the watcher's watch over the event stream, in the shape
// of client.Watch: it streams from one node, and on a broken stream or
// a refusal streams again from the next, after the last revision it was
// told; a compaction ends it.
type sseWatch struct {
	events chan client.Event
	mu     sync.Mutex
	err    error
}

func (s *sseWatch) Events() <-chan client.Event { return s.events }

func (s *sseWatch) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// watchStream starts a's watch of every key over the event stream, after
// after.
func (a *actor) watchStream(ctx context.Context, after api.Revision) *sseWatch {
	started := true
	s := &sseWatch{events: make(chan client.Event, 256)}
	hc := &http.Client{Transport: a.net}
	go func() {
		defer close(s.events)
		for try := 0; ; try++ {
			addr := a.addrs[try%len(a.addrs)]
			err := a.streamOnce(ctx, hc, addr, &after, &started, s.events)
			if ctx.Err() == nil {
				a.w.tracef(a.src(), "watch: the stream from %s ended after %v: %v", addr, after, err)
			}
			var ce *client.CompactedError
			if ctx.Err() != nil || errors.As(err, &ce) {
				s.mu.Lock()
				s.err = cmpErr(ctx.Err(), err)
				s.mu.Unlock()
				return
			}
			if !sleepCtx(ctx, 200*time.Millisecond) {
				s.mu.Lock()
				s.err = ctx.Err()
				s.mu.Unlock()
				return
			}
		}
	}()
	return s
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// streamOnce streams from the node at addr until the stream ends.
func (a *actor) streamOnce(ctx context.Context, hc *http.Client, addr string, after *api.Revision, started *bool, out chan<- client.Event) error {
	u := "http://" + addr + api.PathWatch + "?" + api.QueryPrefix + "="
	if *started {
		u += "&" + api.QueryAfter + "=" + after.String()
	}
	// The head must come within a while: a lost request is asked again.
	hctx, hcancel := context.WithCancel(ctx)
	defer hcancel()
	t := time.AfterFunc(5*time.Second, hcancel)
	req, err := http.NewRequestWithContext(hctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", api.ContentTypeEventStream)
	a.w.mu.Lock()
	sec := a.secret
	a.w.mu.Unlock()
	if sec != "" {
		req.Header.Set("Authorization", "Bearer "+sec)
	}
	resp, err := hc.Do(req)
	if !t.Stop() || err != nil {
		if err == nil {
			_ = resp.Body.Close()
			err = errors.New("sim: no head in time")
		}
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		var e api.Error
		b, _ := io.ReadAll(resp.Body)
		if json.Unmarshal(b, &e) == nil && e.Code == api.CodeCompacted && e.CompactRevision != nil {
			return &client.CompactedError{After: *after, Oldest: *e.CompactRevision}
		}
		return fmt.Errorf("sim: stream answered %d: %s", resp.StatusCode, b)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var event, data string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			event = line[len("event: "):]
		case strings.HasPrefix(line, "data: "):
			data = line[len("data: "):]
		case line == "" && event != "":
			ev, d := event, data
			event, data = "", ""
			switch ev {
			case api.SSEProgress:
				continue
			case api.SSEError:
				var e api.Error
				if json.Unmarshal([]byte(d), &e) == nil && e.Code == api.CodeCompacted && e.CompactRevision != nil {
					return &client.CompactedError{After: *after, Oldest: *e.CompactRevision}
				}
				return fmt.Errorf("sim: stream ended: %s", d)
			}
			var we api.WatchEvent
			if err := json.Unmarshal([]byte(d), &we); err != nil {
				a.w.violate(a.src(), "watch: a streamed event does not decode: %v: %s", err, d)
				return err
			}
			if *started && we.Revision.Compare(*after) <= 0 {
				continue
			}
			select {
			case out <- client.Event{Revision: we.Revision, Type: we.Type, Key: we.Key, Holder: we.Holder, Token: we.Token,
				TTL: api.Duration(we.TTLMs), Reason: we.Reason, At: api.Duration(we.AtMs), Since: api.Duration(we.SinceMs)}:
			case <-ctx.Done():
				return ctx.Err()
			}
			*after, *started = we.Revision, true
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return io.ErrUnexpectedEOF
}
