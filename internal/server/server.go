package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencelock/fencelock/internal/framing"
	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/locktable"
	"github.com/fencelock/fencelock/internal/tlsconfig"
)

// Errors a proposal can end with besides the command's own refusal.
var (
	// ErrNotLeader: this node does not lead, so it cannot stamp or propose.
	ErrNotLeader = errors.New("server: not the leader")
	// ErrUnavailable: raft is shutting down or could not take the proposal.
	ErrUnavailable = errors.New("server: unavailable")
)

// Server is one fencelock node. Create it with New, serve Handler, and
// call Close once the HTTP server has drained.
type Server struct {
	cfg     Config
	log     *slog.Logger
	fsm     *fsm.FSM
	node    *node
	metrics *metrics
	waiters *waitRegistry
	watches *watchHub // watch.go
	clock   clusterClock
	clk     Clock // what clock measures by; also lease timers
	handler http.Handler
	calls   *callHandler
	change  membership // cluster.go: joins and removals

	tls      *tlsconfig.Reloader // nil without TLS (tls.go)
	peerHTTP *http.Client        // this node's calls to other nodes' client ports

	ready atomic.Bool // leader, caught up, orphans dropped
	// startIndex is the last index of the log when the node opened it;
	// until it has applied that far its ACL tables may lag (auth.go).
	startIndex  uint64
	aclCaughtUp atomic.Bool
	counting    atomic.Bool   // count table events in metrics
	closing     chan struct{} // closed by BeginShutdown
	stop        chan struct{} // closed by Close
	once        sync.Once
	wg          sync.WaitGroup
}

// New checks cfg (Config.Validate), opens the data directory and starts
// raft. With DataDir and RaftAddr empty it is a single node on in-memory
// stores and transport. The server becomes ready
// (Ready, /readyz) once it leads and has caught up; until then writes
// answer 503.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	s := &Server{
		cfg:     cfg,
		log:     cfg.Logger,
		closing: make(chan struct{}),
		stop:    make(chan struct{}),
		clk:     cfg.Clock,
	}
	s.clock.clk = cfg.Clock
	s.fsm = fsm.New(s.observe)
	s.metrics = newMetrics(func() float64 { return float64(s.fsm.LastToken()) }, func() float64 { return float64(s.fsm.QueuedCount()) })
	s.metrics.reg.MustRegister(
		newLeaseCollector(s.eachLiveLease),
		buildInfo(cfg.BuildVersion, cfg.BuildCommit),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "fencelock_raft_state", Help: "This node's raft state: 0 follower, 1 candidate, 2 leader, 3 shutdown.",
		}, func() float64 {
			if s.node == nil {
				return float64(raft.Shutdown)
			}
			return float64(s.node.raft.State())
		}),
	)
	s.metrics.reg.MustRegister(s.sessionCollectors()...) // http_session.go
	s.waiters = newWaitRegistry(func(n int) { s.metrics.waiters.Set(float64(n)) })
	s.watches = newWatchHub(cfg.WatchHistory, cfg.WatchMaxWatchers, cfg.WatchMaxPerCaller, s.watchGauge())
	s.handler = s.routes()
	s.calls = s.newCallHandler() // calls.go
	if cfg.TLS.Enabled() {
		r, err := tlsconfig.Load(cfg.TLS)
		if err != nil {
			return nil, fmt.Errorf("server: %w", err)
		}
		s.tls = r
	}
	s.peerHTTP = newPeerHTTP(s.tls, 5*time.Second) // probes bound themselves to probeTimeout
	freed := make(chan struct{}, 1)
	n, err := openNode(cfg, &memorySignaller{FSM: s.fsm, freed: freed, big: bigSnapshot,
		applied:  func(d time.Duration) { s.metrics.apply.Observe(d.Seconds()) },
		restored: func() { s.watches.restored(s.fsm.AppliedIndex()) }}, s.tls)
	if err != nil {
		return nil, err
	}
	s.node = n
	s.startIndex = n.raft.LastIndex()
	s.wg.Add(1)
	go func() { defer s.wg.Done(); s.watches.broadcast(s.stop) }()
	s.wg.Add(1)
	go s.returnFreedMemory(freed)
	s.wg.Add(1)
	go s.watchLeadership()
	if cfg.ClientAddr != "" {
		s.wg.Add(1)
		go s.announceLoop()
	}
	if cfg.TLSReload != nil {
		s.wg.Add(1)
		go s.reloadLoop(cfg.TLSReload)
	}
	return s, nil
}

// Handler is the HTTP API.
func (s *Server) Handler() http.Handler { return s.handler }

// Ready reports whether this node serves writes.
func (s *Server) Ready() bool { return s.ready.Load() }

// WaitReady blocks until the server is ready or ctx ends.
func (s *Server) WaitReady(ctx context.Context) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for !s.Ready() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// BeginShutdown makes waiting requests give up (their queue positions are
// cancelled and they answer 503) so that an HTTP server's Shutdown does not
// wait for them. Other requests finish normally.
func (s *Server) BeginShutdown() {
	s.once.Do(func() { close(s.closing) })
}

// Close stops the leader's timers and raft and closes the stores. Call it
// after the HTTP server has stopped.
func (s *Server) Close() error {
	s.BeginShutdown()
	close(s.stop)
	s.wg.Wait()
	// Connections to other nodes' client ports: one dialed for a call
	// that gave up would sit idle on the other node until it times out.
	s.peerHTTP.CloseIdleConnections()
	return s.node.close()
}

// Serve answers HTTP on ln until ctx ends, then shuts down gracefully: it
// stops accepting, ends waits, lets in-flight requests finish (up to
// grace), and closes the server.
func Serve(ctx context.Context, ln net.Listener, cfg Config, grace time.Duration) error {
	if cfg.ClientAddr == "" {
		cfg.ClientAddr = ln.Addr().String()
	}
	if err := checkLoopback(cfg, "client", ln.Addr()); err != nil {
		ln.Close()
		return err
	}
	s, err := New(cfg)
	if err != nil {
		ln.Close()
		return err
	}
	if !cfg.TLS.Enabled() && !cfg.Insecure {
		s.log.Info("no TLS: the client and raft ports serve loopback addresses only")
	}
	cfg = cfg.withDefaults()
	if cfg.MaxConnections > 0 || cfg.MaxConnectionsPerAddr > 0 {
		total := cfg.MaxConnections
		if total == 0 {
			total = math.MaxInt32
		}
		cl := newConnLimiter(ln, total, cfg.MaxConnectionsPerAddr, s.log)
		s.metrics.reg.MustRegister(cl.collectors()...)
		ln = cl
	}
	hs := &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		// Bounds a slow request body. It does not cut long waits: the
		// server clears the read deadline once the body has been read.
		ReadTimeout: 30 * time.Second,
		IdleTimeout: 2 * time.Minute,
		ErrorLog:    slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		// The sorting listener hands out wrapped connections, so
		// net/http cannot see a TLS one: carry its state (a client
		// certificate names a principal) in the context instead.
		ConnContext: withConnTLS,
	}
	// One port serves HTTP and framed connections (internal/framing):
	// the same handler answers both.
	fs := &framing.Server{
		Handler:               s.Handler(),
		Calls:                 s.Calls(),
		MaxInFlight:           cfg.FramedMaxInFlight,
		MaxPriorityInFlight:   cfg.FramedMaxPriorityInFlight,
		MaxPendingAnswerBytes: cfg.FramedMaxPendingAnswerBytes,
		WriteTimeout:          cfg.FramedWriteTimeout,
		ReadTimeout:           cfg.FramedReadTimeout,
		IdleTimeout:           cfg.FramedIdleTimeout,
	}
	s.metrics.reg.MustRegister(framedCollectors(fs)...)
	served := make(chan error, 1)
	// With TLS the handshake comes first; the sorting reads decrypted
	// bytes, in each connection's own goroutine.
	go func() { served <- hs.Serve(framing.Listen(s.wrapListener(ln), fs)) }()
	s.log.Info("serving", "listen", ln.Addr().String(), "data", cfg.DataDir, "tls", s.tls != nil, "dashboard", dashboardURL(ln.Addr(), s.tls != nil))

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-served:
	}
	s.log.Info("shutting down")
	s.BeginShutdown()
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	shutErr := errors.Join(hs.Shutdown(sctx), fs.Shutdown(sctx))
	if serveErr == nil {
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			serveErr = err
		}
	}
	closeErr := s.Close()
	if errors.Is(serveErr, http.ErrServerClosed) {
		serveErr = nil
	}
	if err := errors.Join(serveErr, shutErr, closeErr); err != nil {
		return fmt.Errorf("server: %w", err)
	}
	s.log.Info("stopped")
	return nil
}

// observe runs inside the state machine's Apply.
func (s *Server) observe(index uint64, ev locktable.Event) {
	if s.counting.Load() {
		s.metrics.observe(ev)
	}
	if ev.Kind == locktable.EventGranted || ev.Kind == locktable.EventWaitDropped {
		s.waiters.deliver(index, ev)
	}
	s.watches.append(index, ev)
}

// eachLiveLease calls fn with the key of every lease held now, for
// fencelock_leases: at the running cluster clock on the leader, at the last
// applied cluster time elsewhere.
func (s *Server) eachLiveLease(fn func(key string)) {
	now, ok := s.clock.now()
	if !ok {
		now = s.fsm.Now()
	}
	s.fsm.EachLive(now, fn)
}
