package clienttest

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/clock"
	"github.com/fencelock/fencelock/internal/framing"
	"github.com/fencelock/fencelock/internal/server"
)

// Server is the real fencelock server (internal/server) run in-process for
// tests: one node on in-memory stores and an in-memory raft transport,
// answering on one loopback port the three ways a real node does (HTTP,
// JSON requests on framed connections, binary calls on framed
// connections), behind one front that injects faults (Fail, Delay,
// NotLeader) and records what reached it (Count, CountVia, RequestIDs)
// the same way whichever way a request came. The lock rules are the
// server's own; this package has none.
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
	fs    *framing.Server
	clock clock.Clock
	stop  chan struct{} // closed by Close: hung requests end
	once  sync.Once

	mu        sync.Mutex
	counts    map[string]int
	via       map[arrival]int
	ids       map[string][]string // route -> request ids, in arrival order
	faults    map[string]string   // route -> wire code to answer, "drop", "hang" or "reset"
	delays    map[string]time.Duration
	notLeader *string
	conns     map[string]*trackedConn // by remote address: every open connection
}

// Transport is a way a request reaches a Server. All three share its one
// port, as on a real node: the client package uses frames, and binary
// calls for the calls the server takes so, unless told to use HTTP
// (client.WithFramed).
type Transport int

const (
	// HTTP is an HTTP/1.1 request.
	HTTP Transport = iota + 1
	// Framed is a JSON request on a framed connection (internal/framing).
	Framed
	// Call is a binary call on a framed connection: the hot calls
	// (acquire, extend, release, check) in internal/callcodec's encoding.
	Call
)

func (t Transport) String() string {
	switch t {
	case HTTP:
		return "HTTP"
	case Framed:
		return "framed"
	case Call:
		return "binary call"
	}
	return fmt.Sprintf("Transport(%d)", int(t))
}

// arrival is a route as reached by one transport, for CountVia.
type arrival struct {
	t     Transport
	route string
}

// NewServer starts a server on 127.0.0.1 whose lease time is clk's, and
// returns once it serves writes. Close it when done. It panics if the
// server cannot start, as httptest.NewServer does.
func NewServer(clk clock.Clock) *Server {
	s := &Server{stop: make(chan struct{}), clock: clk, counts: map[string]int{}, via: map[arrival]int{},
		ids: map[string][]string{}, faults: map[string]string{}, delays: map[string]time.Duration{},
		conns: map[string]*trackedConn{}}
	s.hs = httptest.NewUnstartedServer(s.front(HTTP))
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
	// The port is shared as server.Serve shares it: framed connections
	// are sorted out by their first byte, the rest go to HTTP. Both ways
	// in, and the binary calls, pass through the same front.
	s.fs = &framing.Server{Handler: s.front(Framed), Calls: &callFront{s: s, next: srv.Calls()}}
	s.hs.Listener = framing.Listen(&trackingListener{Listener: s.hs.Listener, s: s}, s.fs)
	s.hs.Start()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := srv.WaitReady(ctx); err != nil {
		s.Close()
		panic(fmt.Sprintf("clienttest: the server did not become ready: %v", err))
	}
	return s
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

// Close stops the server, cutting off requests still waiting in a queue,
// and returns once every request has ended. Calls after the first do
// nothing.
func (s *Server) Close() {
	s.once.Do(func() {
		close(s.stop)
		s.srv.BeginShutdown()
		// Framed connections first: their requests' contexts end with
		// them. Shutdown then waits for their handlers.
		_ = s.fs.Close()
		s.hs.CloseClientConnections()
		s.hs.Close()
		_ = s.fs.Shutdown(context.Background())
		_ = s.srv.Close()
	})
}

// Count returns how many requests reached route ("acquire", "extend",
// "healthz", "cluster/members", …), faulted ones included, whichever way
// they came.
func (s *Server) Count(route string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts[route]
}

// CountVia is Count of the requests that came by t alone.
func (s *Server) CountVia(route string, t Transport) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.via[arrival{t, route}]
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
//
// A framed connection carries many requests, so "drop" and "reset" of
// one request on it cut off the others in flight on it too, as a network
// fault would.
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
// before it is served (or faulted): with a test clock, until the test
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
	req.Host = "localhost" // not httptest's example.com, which the server refuses as another site's name
	s.srv.Handler().ServeHTTP(rec, req)
	var l api.Lease
	if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &l) != nil {
		return "", 0, false
	}
	return l.Holder, l.Token, true
}
