package clienttest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/clock"
	"github.com/fencelock/fencelock/internal/server"
)

// Server is the real fencelock server (internal/server) run in-process for
// tests: one node on in-memory stores and an in-memory raft transport,
// answering HTTP on a loopback port, behind a handler that injects faults
// (Fail, NotLeader) and records what reached it (Count, RequestIDs). The
// lock rules are the server's own; this package has none.
//
// The server measures leases on the clock given to NewServer: with a
// *clock.Fake, the test decides when leases expire and waits elapse. Raft
// itself runs on real time, so a write is committed a moment after it was
// sent: wait for its effect (Holder, Waiters) rather than assume it.
type Server struct {
	URL  string // base URL, e.g. http://127.0.0.1:34567
	Addr string // host:port

	srv   *server.Server
	hs    *httptest.Server
	clock clock.Clock
	stop  chan struct{} // closed by Close: hung requests end
	once  sync.Once

	mu        sync.Mutex
	counts    map[string]int
	ids       map[string][]string // route -> request ids, in arrival order
	faults    map[string]string   // route -> wire code to answer, "drop", "hang" or "reset"
	delays    map[string]time.Duration
	notLeader *string
}

// NewServer starts a server on 127.0.0.1 whose lease time is clk's, and
// returns once it serves writes. Close it when done. It panics if the
// server cannot start, as httptest.NewServer does.
func NewServer(clk clock.Clock) *Server {
	s := &Server{stop: make(chan struct{}), clock: clk, counts: map[string]int{}, ids: map[string][]string{},
		faults: map[string]string{}, delays: map[string]time.Duration{}}
	s.hs = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	s.Addr = s.hs.Listener.Addr().String()
	s.URL = "http://" + s.Addr
	srv, err := server.New(server.Config{
		// No DataDir and no RaftAddr: in-memory stores and transport.
		ClientAddr: s.Addr,
		Logger:     slog.New(slog.DiscardHandler),
		Clock:      serverClock(clk),
		// A single node elects itself after one election timeout.
		HeartbeatTimeout:   20 * time.Millisecond,
		ElectionTimeout:    20 * time.Millisecond,
		LeaderLeaseTimeout: 20 * time.Millisecond,
		// On a test clock, a lease that ends hands the key on at that
		// very instant, and no tick is due but the table's own
		// deadlines (the checkpoint only matters to a restart, which an
		// in-memory server never has).
		MinTickInterval: time.Nanosecond,
		ClockCheckpoint: 365 * 24 * time.Hour,
	})
	if err != nil {
		s.hs.Close()
		panic(fmt.Sprintf("clienttest: starting the server: %v", err))
	}
	s.srv = srv
	s.hs.Start()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := srv.WaitReady(ctx); err != nil {
		s.Close()
		panic(fmt.Sprintf("clienttest: the server did not become ready: %v", err))
	}
	return s
}

// Close stops the server, cutting off requests still waiting in a queue.
// Calls after the first do nothing.
func (s *Server) Close() {
	s.once.Do(func() {
		close(s.stop)
		s.srv.BeginShutdown()
		s.hs.CloseClientConnections()
		s.hs.Close()
		_ = s.srv.Close()
	})
}

// Count returns how many requests reached route ("acquire", "extend",
// "healthz", "cluster/members", …), faulted ones included.
func (s *Server) Count(route string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts[route]
}

// RequestIDs returns the request_id of every write that reached route and
// was passed to the server, in the order they arrived.
func (s *Server) RequestIDs(route string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.ids[route]...)
}

// Fail makes every later request to route answer the wire error code
// (api.CodeNotHeld, api.CodeUnavailable, …), or, with code "drop", close
// the connection without an answer and without serving the request (the
// client sees the server as unreachable), or, with code "hang", never
// answer until the client gives up or the server closes (a frozen node),
// or, with code "reset", serve the request (its effect is committed) and
// then reset the connection instead of answering: the answer is lost, as
// when a node dies just after a commit. An empty code heals the route.
func (s *Server) Fail(route, code string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if code == "" {
		delete(s.faults, route)
		return
	}
	s.faults[route] = code
}

// Delay holds every later request to route for d on the server's clock
// before it is served (or faulted): with a test Clock, until the test
// advances it by d. A client that gives up first is not served. Zero
// heals the route.
func (s *Server) Delay(route string, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d <= 0 {
		delete(s.delays, route)
		return
	}
	s.delays[route] = d
}

// NotLeader makes every request answer 503 not_leader naming leader (""
// names none); nil makes this node serve again.
func (s *Server) NotLeader(leader *string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.notLeader = leader
}

// Waiters returns the holders queued on key, head first, as the server
// has applied them.
func (s *Server) Waiters(key string) []string { return s.srv.Waiters(key) }

// Holder returns who holds key live now, and its token, as the server
// answers GET /v1/lock (not counted, never faulted).
func (s *Server) Holder(key string) (string, uint64, bool) {
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, api.PathLock+"?"+url.Values{api.QueryKey: {key}}.Encode(), nil)
	s.srv.Handler().ServeHTTP(rec, req)
	var l api.Lease
	if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &l) != nil {
		return "", 0, false
	}
	return l.Holder, l.Token, true
}

// route names a request by its path: "acquire" for /v1/acquire, "healthz"
// for /healthz.
func route(path string) string {
	return strings.TrimPrefix(strings.TrimPrefix(path, "/v1/"), "/")
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	rt := route(r.URL.Path)
	s.mu.Lock()
	s.counts[rt]++
	fault, delay := s.faults[rt], s.delays[rt]
	s.mu.Unlock()
	if delay > 0 && !s.wait(r.Context(), delay) {
		return
	}
	s.mu.Lock()
	nl := s.notLeader
	s.mu.Unlock()
	if nl != nil {
		reply(w, api.Error{Message: "not the leader (injected)", Code: api.CodeNotLeader, Leader: *nl})
		return
	}
	switch fault {
	case "", "reset":
	case "hang":
		select {
		case <-r.Context().Done():
		case <-s.stop:
		}
		return
	case "drop":
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				conn.Close()
				return
			}
		}
		reply(w, api.Error{Message: "dropped (injected)", Code: api.CodeUnavailable})
		return
	default:
		reply(w, api.Error{Message: "injected " + fault, Code: fault})
		return
	}
	if r.Method == http.MethodPost && r.Body != nil {
		body, err := io.ReadAll(io.LimitReader(r.Body, api.MaxBodyBytes+1))
		if err != nil {
			return // the client went away
		}
		var req struct {
			RequestID string `json:"request_id"`
		}
		if json.Unmarshal(body, &req) == nil && req.RequestID != "" {
			s.mu.Lock()
			s.ids[rt] = append(s.ids[rt], req.RequestID)
			s.mu.Unlock()
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	if fault == "reset" {
		s.srv.Handler().ServeHTTP(httptest.NewRecorder(), r)
		reset(w)
		return
	}
	s.srv.Handler().ServeHTTP(w, r)
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

// reset closes the connection with a TCP RST and no answer.
func reset(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		return
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		return
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	conn.Close()
}

// reply answers an injected error with the status its code has.
func reply(w http.ResponseWriter, e api.Error) {
	w.Header().Set("Content-Type", api.ContentType)
	w.WriteHeader(api.Status(e.Code))
	_ = json.NewEncoder(w).Encode(e)
}

// serverClock is the clock the server measures leases by: a Fake's
// Uncounted view, so that the test's counts of a Fake (Pending, Next,
// Scheduled) are of the client's timers alone, or clk itself.
func serverClock(clk clock.Clock) clock.Clock {
	if f, ok := clk.(*clock.Fake); ok {
		return f.Uncounted()
	}
	return clk
}
