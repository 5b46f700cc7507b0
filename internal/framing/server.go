package framing

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencelock/fencelock/api"
)

// Server answers framed connections with an http.Handler. The zero value
// is not usable; set Handler. Zero limits take the defaults named below.
type Server struct {
	// Handler answers every request, as it would over HTTP.
	Handler http.Handler
	// Calls, if set, answers the binary calls (MethodCall) of the paths
	// it lists; the server tells each connection which those are
	// (CallsTarget).
	Calls CallHandler
	// MaxInFlight bounds the requests one connection may have unanswered
	// (an answer counts until it is written to the connection, not when it
	// is ready); past it the server stops reading that connection until
	// one is written. Extends and releases do not count against it (see
	// MaxPriorityInFlight). Default DefaultMaxInFlight.
	MaxInFlight int
	// MaxPriorityInFlight is the separate budget of extends and releases
	// (Priority), so that a connection full of waits still keeps its
	// leases alive. Default DefaultMaxPriorityInFlight.
	MaxPriorityInFlight int
	// MaxPendingAnswerBytes bounds the answer bytes a connection may have
	// waiting to be written: past it the server stops reading that
	// connection's requests, and starts none of its lists, until its peer
	// reads. The requests already running still answer, so a connection
	// holds at most this plus the answers of the few lists running (four
	// at most) and of its small requests in flight. Default
	// DefaultMaxPendingAnswerBytes.
	MaxPendingAnswerBytes int64
	// WriteTimeout cuts off a connection whose peer takes no answer bytes
	// for this long while answers wait: a client that does not read is
	// bounded (MaxPendingAnswerBytes) and then closed. Default
	// DefaultWriteTimeout.
	WriteTimeout time.Duration
	// ReadTimeout bounds how long a frame's bytes may take to arrive once
	// its length has. Default DefaultReadTimeout.
	ReadTimeout time.Duration
	// IdleTimeout closes a connection that has nothing in flight and sends
	// no frame for this long. Default DefaultIdleTimeout.
	IdleTimeout time.Duration
	// PrefaceTimeout bounds how long a new connection may take to send its
	// preface (with Listen, its first byte). Default 10s.
	PrefaceTimeout time.Duration
	// StallTimeout cuts a frame whose bytes stop arriving for this long
	// (ReadTimeout still bounds the whole frame). Default
	// DefaultStallTimeout.
	StallTimeout time.Duration
	// MaxBufferedPerAddr bounds the bytes of frames being read (declared
	// and not yet complete) over all the connections from one remote
	// address (IP); a frame that would go past it closes its
	// connection. Default DefaultMaxBufferedPerAddr.
	MaxBufferedPerAddr int64

	// Authenticated, if set, says whether a connection is authenticated:
	// by its credential (its auth frame's; "" before one) or its TLS
	// client certificate, or because nobody needs to be (ACLs off). Until
	// it is, the connection's frames are limited to
	// MaxUnauthenticatedFrame and it is closed after
	// UnauthenticatedIdleTimeout without a frame; it is asked at each
	// frame until it answers true, then no more. nil: every connection
	// counts as authenticated.
	Authenticated func(credential string, tls *tls.ConnectionState) bool
	// MaxUnauthenticatedFrame bounds the frames of a connection that is
	// not authenticated: room for an auth frame and a small request.
	// Default DefaultMaxUnauthenticatedFrame.
	MaxUnauthenticatedFrame int
	// UnauthenticatedIdleTimeout closes a connection that is not
	// authenticated and sends no frame for this long. Default
	// DefaultUnauthenticatedIdleTimeout.
	UnauthenticatedIdleTimeout time.Duration
	// Heavy, if set, names the paths whose answers grow with a page (up
	// to about a megabyte): a connection runs at most maxHeavy of them at
	// once, and starts none while its pending answers are over their
	// bound. nil: none is.
	Heavy func(path string) bool

	callsOnce sync.Once
	callPaths map[string]bool

	mu       sync.Mutex
	conns    map[*serverConn]struct{}
	buffered map[string]int64 // bytes of frames being read, by remote IP
	shutdown bool
	serving  sync.WaitGroup // connections being served

	stats serverStats
}

// CallHandler answers binary calls: the hot calls of the API encoded by
// internal/callcodec instead of as JSON, without an http.Request.
type CallHandler interface {
	// CallPaths are the paths it answers.
	CallPaths() []string
	// ServeCall answers one call to path with its status and answer body:
	// the binary answer when the status is 200, else a JSON error.
	ServeCall(ctx context.Context, from *CallConn, path string, body []byte) (status int, answer []byte)
}

// CallConn is what a CallHandler knows of the connection a call came on.
// The calls of a connection share one: a handler must not change it.
type CallConn struct {
	Local, Remote string
	TLS           *tls.ConnectionState // nil on a plain connection
	// Credential is the connection's credential (KindAuth), "" if none.
	Credential string
}

// Defaults of the Server's limits.
const (
	DefaultMaxInFlight           = 1024
	DefaultMaxPriorityInFlight   = 64
	DefaultMaxPendingAnswerBytes = 8 << 20
	DefaultWriteTimeout          = 10 * time.Second
	DefaultReadTimeout           = 30 * time.Second
	DefaultIdleTimeout           = 5 * time.Minute
	DefaultStallTimeout          = 5 * time.Second
	DefaultMaxBufferedPerAddr    = 16 << 20
	// An auth frame (a credential of up to 4 KiB) fits, and any request
	// a caller may make before it authenticates (health, identity,
	// bootstrap) does.
	DefaultMaxUnauthenticatedFrame    = 8 << 10
	DefaultUnauthenticatedIdleTimeout = 10 * time.Second
)

// Stats is the server's own accounting of its framed connections.
type Stats struct {
	Conns    int   // connections being served
	InFlight int64 // requests read whose answers are not yet written
	// PendingAnswerBytes counts the bytes of answers ready but not yet
	// written to their connections, over all connections.
	PendingAnswerBytes int64
	// PeakConnPendingAnswerBytes is the most any one connection has had
	// pending since the server started.
	PeakConnPendingAnswerBytes int64
	// Connections closed: a peer that took no answer bytes for
	// WriteTimeout; one that sent part of a frame and stalled for
	// ReadTimeout; one idle for IdleTimeout.
	WriteTimeouts, ReadTimeouts, IdleTimeouts int64
	// Connections closed besides: a frame's bytes stopped arriving for
	// StallTimeout (Stalls); a frame longer than its limit, the
	// unauthenticated one or MaxRequestFrame (FramesTooLarge); a frame
	// that would take its address past MaxBufferedPerAddr
	// (AddrBufferCloses); not authenticated and silent for
	// UnauthenticatedIdleTimeout (UnauthenticatedIdle).
	Stalls, FramesTooLarge, AddrBufferCloses, UnauthenticatedIdle int64
	// BufferedBytes counts the bytes of frames being read, over all
	// connections.
	BufferedBytes int64
	// BinaryCalls counts the calls answered in binary (MethodCall).
	BinaryCalls int64
}

type serverStats struct {
	inFlight, pending, peak                  atomic.Int64
	writeTimeouts, readTimeouts, idleClosed  atomic.Int64
	stalls, tooLarge, addrCloses, unauthIdle atomic.Int64
	buffered                                 atomic.Int64
	calls                                    atomic.Int64
}

// Stats returns the server's accounting now.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	n := len(s.conns)
	s.mu.Unlock()
	return Stats{
		Conns:                      n,
		InFlight:                   s.stats.inFlight.Load(),
		PendingAnswerBytes:         s.stats.pending.Load(),
		PeakConnPendingAnswerBytes: s.stats.peak.Load(),
		WriteTimeouts:              s.stats.writeTimeouts.Load(),
		ReadTimeouts:               s.stats.readTimeouts.Load(),
		IdleTimeouts:               s.stats.idleClosed.Load(),
		Stalls:                     s.stats.stalls.Load(),
		FramesTooLarge:             s.stats.tooLarge.Load(),
		AddrBufferCloses:           s.stats.addrCloses.Load(),
		UnauthenticatedIdle:        s.stats.unauthIdle.Load(),
		BufferedBytes:              s.stats.buffered.Load(),
		BinaryCalls:                s.stats.calls.Load(),
	}
}

// callPath reports whether Calls answers path; the set is built once.
func (s *Server) callPath(path string) bool {
	s.callsOnce.Do(func() {
		s.callPaths = make(map[string]bool)
		for _, p := range s.Calls.CallPaths() {
			s.callPaths[p] = true
		}
	})
	return s.callPaths[path]
}

// ErrServerClosed: the server was shut down or closed.
var ErrServerClosed = errors.New("framing: server closed")

// hostOf is the host of a host:port address (all of it without a port).
func hostOf(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}

func orDefault[T int | int64 | time.Duration](v, d T) T {
	if v > 0 {
		return v
	}
	return d
}

func (s *Server) prefaceTimeout() time.Duration {
	return orDefault(s.PrefaceTimeout, 10*time.Second)
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
		local:      c.LocalAddr().String(),
		remote:     c.RemoteAddr().String(),
		tls:        TLSState(c),
		s:          s,
		c:          c,
		br:         br,
		ctx:        ctx,
		cancel:     cancel,
		maxIn:      orDefault(s.MaxInFlight, DefaultMaxInFlight),
		maxPri:     orDefault(s.MaxPriorityInFlight, DefaultMaxPriorityInFlight),
		maxPending: orDefault(s.MaxPendingAnswerBytes, DefaultMaxPendingAnswerBytes),
		idle:       orDefault(s.IdleTimeout, DefaultIdleTimeout),
		readLimit:  orDefault(s.ReadTimeout, DefaultReadTimeout),
		stall:      orDefault(s.StallTimeout, DefaultStallTimeout),
		ip:         hostOf(c.RemoteAddr().String()),
		pending:    make(map[uint32]context.CancelFunc),
		work:       make(chan job),
	}
	sc.room.L = &sc.mu
	sc.touch()
	sc.from.Store(&CallConn{Local: sc.local, Remote: sc.remote, TLS: sc.tls})
	if s.Authenticated == nil {
		sc.authed.Store(true)
	} else {
		sc.unauthIdle = orDefault(s.UnauthenticatedIdleTimeout, DefaultUnauthenticatedIdleTimeout)
	}
	sc.bw = batchWriter{
		w:       deadlineWriter{c: c, timeout: orDefault(s.WriteTimeout, DefaultWriteTimeout)},
		written: sc.written,
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
	tls           *tls.ConnectionState   // nil on a plain connection
	auth          atomic.Pointer[string] // the credential of the last auth frame
	cancel        context.CancelCauseFunc

	maxIn, maxPri   int
	maxPending      int64
	idle, readLimit time.Duration
	stall           time.Duration
	ip              string // the remote address's host: its buffered bytes are counted together
	// authed: the connection is authenticated (Server.Authenticated);
	// until then unauthIdle is its idle timeout.
	authed     atomic.Bool
	unauthIdle time.Duration

	bw       batchWriter
	work     chan job       // to idle workers; closed when reading ends
	idleW    atomic.Int32   // workers waiting on work
	handlers sync.WaitGroup // workers

	mu       sync.Mutex
	room     sync.Cond // signalled when an answer is written, on stop and on failure
	pending  map[uint32]context.CancelFunc
	stopping bool
	// Counted from when a request is read until its answer is written
	// (or the connection fails): requests by budget, and answer bytes.
	inFlight, inFlightPri int
	pendingBytes          int64
	heavy                 int   // lists running (handle)
	midFrame              bool  // the reader has a frame's length and waits for the rest
	failed                error // a write failed: the connection is done

	// active is when a frame was last read or answers last written, in
	// monotonic nanoseconds (sinceStart): the idle timeouts count from
	// it. The reader keeps the read deadline it armed for them and only
	// moves it when it passes (awaitFrame), not at every frame.
	active atomic.Int64
	// idleArmed (the reader's own): the read deadline armed is the idle
	// one, not a frame's (next's slow path) or none.
	idleArmed bool
	// from is what a binary call's handler knows of the connection,
	// replaced whole when an auth frame changes the credential.
	from atomic.Pointer[CallConn]
}

// start is the origin of the monotonic times of a connection's activity.
var start = time.Now()

func sinceStart() int64 { return int64(time.Since(start)) }

// touch notes activity: a frame read or answers written.
func (sc *serverConn) touch() { sc.active.Store(sinceStart()) }

func (sc *serverConn) stopReading() {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	sc.stopping = true
	sc.room.Broadcast()
	// Wake a reader blocked in Read; it sees stopping and ends.
	sc.c.SetReadDeadline(time.Now())
}

// close ends the connection now, and with it its requests' contexts.
func (sc *serverConn) close() {
	sc.cancel(ErrServerClosed)
	sc.c.Close()
}

// awaitFrame waits for the length of the next frame and answers it,
// leaving it unread. A connection with nothing in flight that reads no
// frame and writes no answer for its idle limit is closed; the read
// deadline that enforces it is armed once and moved only when it passes
// while the connection was not idle that long (a long wait in flight is
// not idleness), rather than at every frame.
func (sc *serverConn) awaitFrame() (int, error) {
	for {
		if !sc.idleArmed {
			sc.armIdle()
		}
		hdr, err := sc.br.Peek(4)
		if err == nil {
			return int(binary.BigEndian.Uint32(hdr)), nil
		}
		sc.mu.Lock()
		stopping, busy := sc.stopping, sc.inFlight+sc.inFlightPri > 0
		sc.mu.Unlock()
		switch {
		case stopping:
			return 0, ErrServerClosed
		case !errors.Is(err, os.ErrDeadlineExceeded):
			return 0, err
		case busy:
			sc.touch()
		case time.Duration(sinceStart()-sc.active.Load()) >= sc.idleLimit():
			if !sc.authed.Load() {
				sc.s.stats.unauthIdle.Add(1)
				return 0, fmt.Errorf("framing: not authenticated and idle for %v: %w", sc.idleLimit(), err)
			}
			sc.s.stats.idleClosed.Add(1)
			return 0, fmt.Errorf("framing: idle for %v: %w", sc.idle, err)
		}
		sc.idleArmed = false
	}
}

// armIdle sets the read deadline to the end of the idle limit counted
// from the last activity, unless the connection is stopping (whose
// reader stopReading woke).
func (sc *serverConn) armIdle() {
	at := start.Add(time.Duration(sc.active.Load()) + sc.idleLimit())
	sc.mu.Lock()
	if !sc.stopping {
		sc.c.SetReadDeadline(at)
	}
	sc.mu.Unlock()
	sc.idleArmed = true
}

// awaitRoom blocks while ok is false, until the connection stops or fails.
func (sc *serverConn) awaitRoomLocked(ok func() bool) error {
	for !sc.stopping && sc.failed == nil && !ok() {
		sc.room.Wait()
	}
	if sc.stopping {
		return ErrServerClosed
	}
	return sc.failed
}

// idleLimit is how long the connection may send nothing with nothing in
// flight.
func (sc *serverConn) idleLimit() time.Duration {
	if !sc.authed.Load() {
		return min(sc.idle, sc.unauthIdle)
	}
	return sc.idle
}

// checkAuth asks the server whether the connection is authenticated now,
// until it is.
func (sc *serverConn) checkAuth() bool {
	if sc.authed.Load() {
		return true
	}
	cred := ""
	if p := sc.auth.Load(); p != nil {
		cred = *p
	}
	if sc.s.Authenticated(cred, sc.tls) {
		sc.authed.Store(true)
		return true
	}
	return false
}

// readBuffer is the read buffer of an authenticated framed connection:
// many small frames a read.
const readBuffer = 16 << 10

// growReader gives an authenticated connection its full read buffer,
// keeping the bytes the small one holds.
func (sc *serverConn) growReader() {
	if sc.br.Size() >= readBuffer {
		return
	}
	rest, _ := sc.br.Peek(sc.br.Buffered())
	var r io.Reader = sc.c
	if len(rest) > 0 {
		r = io.MultiReader(bytes.NewReader(bytes.Clone(rest)), sc.c)
	}
	sc.br = bufio.NewReaderSize(r, readBuffer)
}

// frameLimit is the longest frame the connection may send next.
func (sc *serverConn) frameLimit() int {
	if !sc.checkAuth() {
		return orDefault(sc.s.MaxUnauthenticatedFrame, DefaultMaxUnauthenticatedFrame)
	}
	sc.growReader()
	return MaxRequestFrame
}

// errAddrBuffer: the frame would take its address past
// MaxBufferedPerAddr.
var errAddrBuffer = errors.New("framing: the connections from this address are reading too many frame bytes at once")

// reserve counts n bytes of a frame being read against ip's budget.
func (s *Server) reserve(ip string, n int) bool {
	limit := orDefault(s.MaxBufferedPerAddr, DefaultMaxBufferedPerAddr)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.buffered[ip]+int64(n) > limit {
		return false
	}
	if s.buffered == nil {
		s.buffered = make(map[string]int64)
	}
	s.buffered[ip] += int64(n)
	s.stats.buffered.Add(int64(n))
	return true
}

func (s *Server) unreserve(ip string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.buffered[ip] -= int64(n); s.buffered[ip] <= 0 {
		delete(s.buffered, ip)
	}
	s.stats.buffered.Add(-int64(n))
}

// next reads the next frame once the connection's pending answers are
// under their bound (backpressure on a peer that does not read). A frame
// that has arrived whole with the last read is taken from the buffer at
// once. One that has not must keep arriving: each read that brings bytes
// extends its deadline by the stall timeout, up to the read timeout from
// its start, and its bytes count against its address's budget until
// read.
func (sc *serverConn) next() (request, error) {
	limit := sc.frameLimit() // first: an auth frame just read changes the idle limit
	sc.mu.Lock()
	err := sc.awaitRoomLocked(func() bool { return sc.pendingBytes <= sc.maxPending })
	sc.mu.Unlock()
	if err != nil {
		return request{}, err
	}
	n, err := sc.awaitFrame()
	if err != nil {
		return request{}, err
	}
	if n >= requestHeader-4 && n <= limit && sc.br.Buffered() >= 4+n {
		b, _ := sc.br.Peek(4 + n)
		buf := make([]byte, n)
		copy(buf, b[4:])
		_, _ = sc.br.Discard(4 + n)
		sc.touch()
		return parseRequest(buf)
	}
	return sc.nextSlow(limit)
}

// nextSlow reads a frame whose bytes are still to come.
func (sc *serverConn) nextSlow(limit int) (request, error) {
	var (
		reserved      int
		start, pushed time.Time
		stalled       bool // the deadline armed is the stall's, not the frame's end
	)
	sc.idleArmed = false
	arm := func(now time.Time) {
		end := start.Add(sc.readLimit)
		d := now.Add(sc.stall)
		stalled = d.Before(end)
		if !stalled {
			d = end
		}
		pushed = now
		sc.mu.Lock()
		if !sc.stopping {
			sc.c.SetReadDeadline(d)
		}
		sc.mu.Unlock()
	}
	hooks := &frameHooks{
		began: func(n int) error {
			if !sc.s.reserve(sc.ip, n) {
				sc.s.stats.addrCloses.Add(1)
				return errAddrBuffer
			}
			reserved = n
			sc.mu.Lock()
			sc.midFrame = true
			sc.mu.Unlock()
			start = time.Now()
			arm(start)
			return nil
		},
		progress: func() {
			// Pushing the deadline costs a timer reset: do it only once
			// a quarter of the stall timeout has passed.
			if now := time.Now(); now.Sub(pushed) > sc.stall/4 {
				arm(now)
			}
		},
	}
	buf, err := readFrameThen(sc.br, requestHeader-4, limit, hooks)
	if reserved > 0 {
		sc.s.unreserve(sc.ip, reserved)
	}
	sc.mu.Lock()
	mid, stopping := sc.midFrame, sc.stopping
	sc.midFrame = false
	sc.mu.Unlock()
	if err != nil {
		switch {
		case stopping:
			return request{}, ErrServerClosed
		case errors.Is(err, errTooLarge):
			sc.s.stats.tooLarge.Add(1)
			return request{}, err
		case errors.Is(err, os.ErrDeadlineExceeded) && mid && stalled:
			sc.s.stats.stalls.Add(1)
			return request{}, fmt.Errorf("framing: a frame's bytes stopped arriving for %v: %w", sc.stall, err)
		case errors.Is(err, os.ErrDeadlineExceeded) && mid:
			sc.s.stats.readTimeouts.Add(1)
			return request{}, fmt.Errorf("framing: a frame took longer than %v: %w", sc.readLimit, err)
		}
		return request{}, err
	}
	sc.touch()
	return parseRequest(buf)
}

func (sc *serverConn) readLoop() error {
	for {
		q, err := sc.next()
		if err != nil {
			return err
		}
		if q.kind == KindAuth {
			cred := string(q.body)
			sc.auth.Store(&cred)
			sc.from.Store(&CallConn{Local: sc.local, Remote: sc.remote, TLS: sc.tls, Credential: cred})
			continue
		}
		if q.kind == KindCancel {
			sc.mu.Lock()
			if cancel, ok := sc.pending[q.id]; ok {
				cancel()
			}
			sc.mu.Unlock()
			continue
		}
		pri := Priority(q.target)
		sc.mu.Lock()
		// Backpressure: wait for a slot of the request's budget before
		// reading more.
		if err := sc.awaitRoomLocked(func() bool {
			if pri {
				return sc.inFlightPri < sc.maxPri
			}
			return sc.inFlight < sc.maxIn
		}); err != nil {
			sc.mu.Unlock()
			return err
		}
		if _, dup := sc.pending[q.id]; dup {
			sc.mu.Unlock()
			return fmt.Errorf("%w: request id %d is already in flight", ErrFrame, q.id)
		}
		rctx, rcancel := context.WithCancel(sc.ctx)
		sc.pending[q.id] = rcancel
		if pri {
			sc.inFlightPri++
		} else {
			sc.inFlight++
		}
		sc.s.stats.inFlight.Add(1)
		sc.mu.Unlock()
		sc.dispatch(job{rctx, rcancel, q, pri})
	}
}

// written gives back the slots and bytes of answers that went out (or
// never will: err set, and then the connection is closed).
func (sc *serverConn) written(tags []frameTag, err error) {
	var bytes int64
	sc.mu.Lock()
	for _, t := range tags {
		bytes += int64(t.size)
		if t.priority {
			sc.inFlightPri--
		} else {
			sc.inFlight--
		}
	}
	sc.pendingBytes -= bytes
	if err != nil && sc.failed == nil {
		sc.failed = fmt.Errorf("framing: writing answers: %w", err)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			sc.s.stats.writeTimeouts.Add(1)
		}
	}
	sc.touch()
	sc.room.Broadcast()
	sc.mu.Unlock()
	sc.s.stats.inFlight.Add(-int64(len(tags)))
	sc.s.stats.pending.Add(-bytes)
	if err != nil {
		// The peer is gone or does not read: closing makes the reader
		// stop too.
		sc.c.Close()
	}
}

// maxHeavy bounds the heavy requests running at once on one connection.
const maxHeavy = 4

// job is one request for a worker.
type job struct {
	ctx      context.Context
	cancel   context.CancelFunc
	q        request
	priority bool
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
		sc.handle(j)
		if sc.idleW.Add(1) > maxIdleWorkers {
			sc.idleW.Add(-1)
			return
		}
		var ok bool
		j, ok = <-sc.work
		sc.idleW.Add(-1)
		if !ok {
			return
		}
	}
}

func (sc *serverConn) handle(j job) {
	// A list builds an answer of up to a megabyte or so: a burst of them
	// read at once (up to MaxInFlight) would build every answer before one
	// could be counted. So lists run at most maxHeavy at a time per
	// connection, and only while its pending answers are under their
	// bound; the others' answers are small (the API's limits bound them).
	// Once the connection failed nothing will be written: the handler is
	// not run.
	// A binary call is never a list.
	heavy := sc.s.Heavy != nil && j.q.method != MethodCall && sc.s.Heavy(j.q.target[:strings.IndexByte(j.q.target+"?", '?')])
	failed := false
	if heavy {
		sc.mu.Lock()
		for sc.failed == nil && (sc.pendingBytes > sc.maxPending || sc.heavy >= maxHeavy) {
			sc.room.Wait()
		}
		failed = sc.failed != nil
		sc.heavy++
		sc.mu.Unlock()
	}
	var status int
	var body []byte
	if failed {
		status = http.StatusServiceUnavailable
	} else {
		status, body = sc.serveOne(j.ctx, j.q)
	}
	j.cancel()
	size := answerHeader + len(body)
	sc.mu.Lock()
	delete(sc.pending, j.q.id)
	sc.pendingBytes += int64(size)
	peak := sc.pendingBytes
	if heavy {
		sc.heavy--
		sc.room.Broadcast()
	}
	sc.mu.Unlock()
	sc.s.stats.pending.Add(int64(size))
	for {
		old := sc.s.stats.peak.Load()
		if peak <= old || sc.s.stats.peak.CompareAndSwap(old, peak) {
			break
		}
	}
	// Errors are handled in written.
	_ = sc.bw.write(frameTag{size: size, priority: j.priority}, outFrame{answer: true, id: j.q.id, status: status, body: body})
}

// deadlineWriter writes in chunks, each of which must go out within
// timeout: a peer that reads slowly is fine, one that stops is cut off.
type deadlineWriter struct {
	c       net.Conn
	timeout time.Duration
}

const writeChunk = 256 << 10

func (w deadlineWriter) Write(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		end := min(n+writeChunk, len(p))
		if err := w.c.SetWriteDeadline(time.Now().Add(w.timeout)); err != nil {
			return n, err
		}
		m, err := w.c.Write(p[n:end])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// serveOne runs the handler on one request.
func (sc *serverConn) serveOne(ctx context.Context, q request) (status int, body []byte) {
	defer func() {
		if p := recover(); p != nil {
			// net/http answers nothing on a handler panic and drops the
			// connection; one request must not take the others down, so
			// this one gets a 500.
			status, body = errorAnswer(api.CodeInternal, "internal error")
		}
	}()
	if calls := sc.s.Calls; calls != nil {
		switch {
		case q.method == MethodCall:
			if !sc.s.callPath(q.target) {
				return errorAnswer(api.CodeNotFound, "no binary call on this path")
			}
			sc.s.stats.calls.Add(1)
			status, body = calls.ServeCall(ctx, sc.from.Load(), q.target, q.body)
			if len(body) > MaxFrame-answerHeader {
				return errorAnswer(api.CodeInternal, "answer too large for a frame")
			}
			return status, body
		case q.target == CallsTarget && q.method == http.MethodGet:
			return http.StatusOK, []byte(strings.Join(calls.CallPaths(), "\n"))
		}
	} else if q.method == MethodCall {
		return errorAnswer(api.CodeNotFound, "this server answers no binary calls")
	}
	w := &answerWriter{header: make(http.Header, 2)}
	path, query, _ := strings.Cut(q.target, "?")
	r := &http.Request{
		Method:        q.method,
		URL:           &url.URL{Path: path, RawQuery: query},
		Proto:         Proto,
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
	if cred := sc.auth.Load(); cred != nil {
		r.Header.Set("Authorization", *cred)
	}
	sc.s.Handler.ServeHTTP(w, r.WithContext(ctx))
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if w.body.Len() > MaxFrame-answerHeader {
		return errorAnswer(api.CodeInternal, "answer too large for a frame")
	}
	return w.status, w.body.Bytes()
}

// Proto is the Proto of the http.Requests a framed connection's requests
// are served as: no browser speaks the framed protocol, so the HTTP API's
// protections against pages of other sites do not apply to them.
const Proto = "FLP/1"

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

// errorAnswer is the API's error answer for code, as the HTTP API writes
// one: its status and JSON body.
func errorAnswer(code, message string) (int, []byte) {
	b, _ := json.Marshal(api.Error{Code: code, Message: message}) // a struct of strings always marshals
	return api.Status(code), append(b, '\n')
}
