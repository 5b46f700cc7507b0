package framing

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Server answers framed connections with an http.Handler. The zero value
// is not usable; set Handler.
type Server struct {
	// Handler answers every request, as it would over HTTP.
	Handler http.Handler
	// MaxInFlight bounds the requests one connection may have unanswered;
	// past it the server stops reading that connection until one is
	// answered. Default 1024.
	MaxInFlight int
	// PrefaceTimeout bounds how long a new connection may take to send its
	// preface (with Listen, its first byte). Default 10s.
	PrefaceTimeout time.Duration

	mu       sync.Mutex
	conns    map[*serverConn]struct{}
	shutdown bool
	serving  sync.WaitGroup // connections being served
}

// ErrServerClosed: the server was shut down or closed.
var ErrServerClosed = errors.New("framing: server closed")

func (s *Server) maxInFlight() int {
	if s.MaxInFlight > 0 {
		return s.MaxInFlight
	}
	return 1024
}

func (s *Server) prefaceTimeout() time.Duration {
	if s.PrefaceTimeout > 0 {
		return s.PrefaceTimeout
	}
	return 10 * time.Second
}

// serve reads the preface from br (c's reader, which may hold bytes read
// ahead), echoes it, and serves requests until c fails or the server shuts
// down. It always closes c.
func (s *Server) serve(c net.Conn, br *bufio.Reader) error {
	c.SetReadDeadline(time.Now().Add(s.prefaceTimeout()))
	var p [len(Preface)]byte
	if _, err := io.ReadFull(br, p[:]); err != nil || string(p[:]) != Preface {
		c.Close()
		if err == nil {
			err = fmt.Errorf("%w: bad preface", ErrFrame)
		}
		return err
	}
	c.SetReadDeadline(time.Time{})
	ctx, cancel := context.WithCancelCause(context.Background())
	sc := &serverConn{
		local:   c.LocalAddr().String(),
		remote:  c.RemoteAddr().String(),
		tls:     TLSState(c),
		bw:      batchWriter{w: c},
		s:       s,
		c:       c,
		br:      br,
		ctx:     ctx,
		cancel:  cancel,
		slots:   make(chan struct{}, s.maxInFlight()),
		pending: make(map[uint32]context.CancelFunc),
		stop:    make(chan struct{}),
		work:    make(chan job),
	}
	if !s.track(sc) {
		c.Close()
		cancel(ErrServerClosed)
		return ErrServerClosed
	}
	defer s.untrack(sc)
	if _, err := c.Write([]byte(Preface)); err != nil {
		c.Close()
		cancel(err)
		return err
	}
	err := sc.readLoop()
	close(sc.work)
	if !errors.Is(err, ErrServerClosed) {
		// The peer is gone or broke the protocol: end every request's
		// context, as an HTTP server does when a connection drops. On a
		// shutdown the requests in flight finish and are answered.
		cancel(err)
	}
	sc.handlers.Wait()
	cancel(nil)
	c.Close()
	if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || errors.Is(err, ErrServerClosed) {
		return nil
	}
	return err
}

func (s *Server) track(sc *serverConn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shutdown {
		return false
	}
	if s.conns == nil {
		s.conns = make(map[*serverConn]struct{})
	}
	s.conns[sc] = struct{}{}
	s.serving.Add(1)
	return true
}

func (s *Server) untrack(sc *serverConn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, sc)
	s.serving.Done()
}

// Shutdown stops taking requests: connections stop reading, and the server
// waits for the requests already in flight to be answered and each
// connection to close (up to ctx; then it closes what is left). Ending the
// in-flight requests early (long waits, say) is the handler's business.
func (s *Server) Shutdown(ctx context.Context) error {
	conns := s.closeDoors()
	for _, sc := range conns {
		sc.stopReading()
	}
	idle := make(chan struct{})
	go func() {
		s.serving.Wait()
		close(idle)
	}()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		for _, sc := range conns {
			sc.close()
		}
		return ctx.Err()
	}
}

// Close closes every connection at once; in-flight requests see their
// contexts end.
func (s *Server) Close() error {
	for _, sc := range s.closeDoors() {
		sc.close()
	}
	return nil
}

// closeDoors refuses new connections from now on and returns the ones
// being served.
func (s *Server) closeDoors() []*serverConn {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.shutdown = true
	conns := make([]*serverConn, 0, len(s.conns))
	for sc := range s.conns {
		conns = append(conns, sc)
	}
	return conns
}

// serverConn is one framed connection.
type serverConn struct {
	s             *Server
	c             net.Conn
	local, remote string // the connection's addresses, for each request
	br            *bufio.Reader
	ctx           context.Context
	tls           *tls.ConnectionState // nil on a plain connection
	cancel        context.CancelCauseFunc

	bw       batchWriter
	slots    chan struct{}  // one per request in flight
	work     chan job       // to idle workers; closed when reading ends
	idle     atomic.Int32   // workers waiting on work
	handlers sync.WaitGroup // workers

	stop     chan struct{} // closed by stopReading
	stopOnce sync.Once

	mu       sync.Mutex
	pending  map[uint32]context.CancelFunc
	stopping bool
}

func (sc *serverConn) stopReading() {
	sc.mu.Lock()
	sc.stopping = true
	sc.mu.Unlock()
	sc.stopOnce.Do(func() { close(sc.stop) })
	// Wake a reader blocked in Read; it sees stopping and ends.
	sc.c.SetReadDeadline(time.Now())
}

// close ends the connection now, and with it its requests' contexts.
func (sc *serverConn) close() {
	sc.cancel(ErrServerClosed)
	sc.c.Close()
}

func (sc *serverConn) readLoop() error {
	for {
		q, err := readRequest(sc.br)
		if err != nil {
			sc.mu.Lock()
			stopping := sc.stopping
			sc.mu.Unlock()
			if stopping {
				return ErrServerClosed
			}
			return err
		}
		if q.kind == KindCancel {
			sc.mu.Lock()
			if cancel, ok := sc.pending[q.id]; ok {
				cancel()
			}
			sc.mu.Unlock()
			continue
		}
		// Backpressure: wait for a slot before reading more.
		select {
		case sc.slots <- struct{}{}:
		case <-sc.stop:
			return ErrServerClosed
		}
		rctx, rcancel := context.WithCancel(sc.ctx)
		sc.mu.Lock()
		if sc.stopping {
			sc.mu.Unlock()
			rcancel()
			<-sc.slots
			return ErrServerClosed
		}
		if _, dup := sc.pending[q.id]; dup {
			sc.mu.Unlock()
			rcancel()
			<-sc.slots
			return fmt.Errorf("%w: request id %d is already in flight", ErrFrame, q.id)
		}
		sc.pending[q.id] = rcancel
		sc.mu.Unlock()
		sc.dispatch(job{rctx, rcancel, q})
	}
}

// job is one request for a worker.
type job struct {
	ctx    context.Context
	cancel context.CancelFunc
	q      request
}

// maxIdleWorkers bounds the goroutines a connection keeps waiting for
// work. Reusing them saves growing a fresh goroutine's stack for every
// request, which the handler's depth makes a measurable cost.
const maxIdleWorkers = 64

// dispatch gives j to an idle worker, or to a new one when none is idle
// (a request never waits for another to finish).
func (sc *serverConn) dispatch(j job) {
	select {
	case sc.work <- j:
	default:
		sc.handlers.Add(1)
		go sc.worker(j)
	}
}

func (sc *serverConn) worker(j job) {
	defer sc.handlers.Done()
	for {
		sc.handle(j.ctx, j.cancel, j.q)
		if sc.idle.Add(1) > maxIdleWorkers {
			sc.idle.Add(-1)
			return
		}
		var ok bool
		j, ok = <-sc.work
		sc.idle.Add(-1)
		if !ok {
			return
		}
	}
}

func (sc *serverConn) handle(ctx context.Context, cancel context.CancelFunc, q request) {
	status, body := sc.serveOne(ctx, q)
	cancel()
	sc.mu.Lock()
	delete(sc.pending, q.id)
	sc.mu.Unlock()
	err := sc.bw.write(func(dst []byte) []byte { return appendAnswer(dst, q.id, status, body) })
	<-sc.slots
	if err != nil {
		// The peer is gone: closing makes the reader stop too.
		sc.c.Close()
	}
}

// serveOne runs the handler on one request.
func (sc *serverConn) serveOne(ctx context.Context, q request) (status int, body []byte) {
	w := &answerWriter{header: make(http.Header, 2)}
	defer func() {
		if p := recover(); p != nil {
			// net/http answers nothing on a handler panic and drops the
			// connection; one request must not take the others down, so
			// this one gets a 500.
			status, body = http.StatusInternalServerError, []byte(`{"error":"internal error","code":"internal"}`+"\n")
		}
	}()
	path, query, _ := strings.Cut(q.target, "?")
	r := &http.Request{
		Method:        q.method,
		URL:           &url.URL{Path: path, RawQuery: query},
		Proto:         "FLP/1",
		ProtoMajor:    1,
		Header:        make(http.Header, 1),
		Body:          io.NopCloser(bytes.NewReader(q.body)),
		ContentLength: int64(len(q.body)),
		Host:          sc.local,
		RemoteAddr:    sc.remote,
		RequestURI:    q.target,
		TLS:           sc.tls,
	}
	if len(q.body) > 0 {
		r.Header.Set("Content-Type", "application/json")
	}
	sc.s.Handler.ServeHTTP(w, r.WithContext(ctx))
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if w.body.Len() > MaxFrame-answerHeader {
		return http.StatusInternalServerError, []byte(`{"error":"answer too large for a frame","code":"internal"}` + "\n")
	}
	return w.status, w.body.Bytes()
}

// answerWriter collects one answer.
type answerWriter struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (w *answerWriter) Header() http.Header { return w.header }

func (w *answerWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}

func (w *answerWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.body.Write(b)
}
