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
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/fencelock/fencelock/internal/auth"
	"github.com/fencelock/fencelock/internal/clustersecret"
	"github.com/fencelock/fencelock/internal/framing"
	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/httpapi"
	"github.com/fencelock/fencelock/internal/node"
	"github.com/fencelock/fencelock/internal/node/etcd"
	"github.com/fencelock/fencelock/internal/node/hashicorp"
	"github.com/fencelock/fencelock/internal/node/raftport"
	"github.com/fencelock/fencelock/internal/replica"
	"github.com/fencelock/fencelock/internal/service"
	"github.com/fencelock/fencelock/internal/tlsconfig"
)

// The authorization seam of the transports (Config.Authorizer).
type (
	Authorizer     = httpapi.Authorizer
	AuthorizerFunc = httpapi.AuthorizerFunc
	Call           = httpapi.Call
)

// Error is how the service refuses or fails (service.Error).
type Error = service.Error

// Server is one fencelock node: the raft node over its stores, the lock
// service over it, and the HTTP and framed transports over the service.
// Create it with New, serve Handler (and Calls), and call Close once the
// transports have drained.
type Server struct {
	// The service's operations (Acquire, Release, ...) are the
	// server's, for in-process callers: trusted, no principal checked.
	*service.Service
	cfg   Config
	log   *slog.Logger
	fsm   *fsm.FSM
	node  engineNode
	api   *httpapi.API
	guard *auth.Guard
	reg   *prometheus.Registry
	tls   *tlsconfig.Reloader // nil without TLS
	peers *peers

	stop chan struct{} // closed by Close
	once sync.Once
	wg   sync.WaitGroup
}

// New checks cfg (Config.Validate), opens the data directory and starts
// raft. With DataDir and RaftAddr empty it is a single node on in-memory
// stores and transport. The server becomes ready (Ready, /readyz) once it
// leads and has caught up; until then writes answer 503.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	s := &Server{cfg: cfg, log: cfg.Logger, stop: make(chan struct{}), reg: prometheus.NewRegistry()}
	if cfg.TLS.Enabled() {
		r, err := tlsconfig.Load(cfg.TLS)
		if err != nil {
			return nil, fmt.Errorf("server: %w", err)
		}
		s.tls = r
	}
	s.peers = newPeers(s.tls, cfg.AuthToken)
	svc, err := service.New(serviceConfig(cfg, s.peers))
	if err != nil {
		return nil, err
	}
	s.Service, s.fsm = svc, svc.FSM()
	s.guard = auth.NewGuard(svc, cfg.Logger)
	s.api = httpapi.New(httpapi.Config{
		Service: svc, Guard: s.guard, Authorizer: cfg.Authorizer, Logger: cfg.Logger,
		Metrics: promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{}), Gatherer: s.reg, StreamWriteTimeout: cfg.sseWriteTimeout,
		Hosts: hostCheck(cfg, s.tls),
	})
	apply := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "fencelock_apply_seconds", Help: "Time the state machine took to apply one committed log entry, on every node.",
		Buckets: prometheus.ExponentialBuckets(0.000001, 4, 12), // 1µs .. ~4.2s
	})
	peerTLS, err := s.raftCredential()
	if err != nil {
		return nil, err
	}
	n, err := openNode(cfg.Engine, cfg.Transport, node.Config{
		DataDir: cfg.DataDir, NodeID: cfg.NodeID, RaftAddr: cfg.RaftAddr, Peers: nodePeers(cfg.Peers), Join: cfg.Join,
		TLS: peerTLS, InsecureRaft: cfg.InsecureRaft, Insecure: cfg.Insecure, Listener: cfg.raftListener, DialRaft: cfg.dialRaft,
		Logger: cfg.Logger,
		RaftPort: raftport.Limits{MaxConns: cfg.MaxRaftConnections, MaxHandshakes: cfg.MaxRaftHandshakes,
			HandshakeTimeout: cfg.RaftHandshakeTimeout},
		HeartbeatTimeout: cfg.HeartbeatTimeout, ElectionTimeout: cfg.ElectionTimeout, LeaderLeaseTimeout: cfg.LeaderLeaseTimeout,
		SnapshotThreshold: cfg.SnapshotThreshold, TrailingLogs: cfg.TrailingLogs, SnapshotInterval: cfg.SnapshotInterval,
		WALSegmentSize: cfg.WALSegmentSize, TokenFloor: cfg.TokenFloor, AsyncLogWrites: cfg.AsyncLogWrites,
		Hooks: node.Hooks{Applied: func(d time.Duration) { apply.Observe(d.Seconds()) }, Restored: svc.Restored},
	}, s.fsm)
	if err != nil {
		return nil, err
	}
	s.node = n
	if err := s.checkClusterData(peerTLS); err != nil {
		n.Close()
		return nil, err
	}
	if cfg.TLS.Enabled() && cfg.RaftAddr != "" && cfg.Transport == nil && cfg.TLS.SameCA() {
		s.log.Warn("the client CA is the peer CA: a client certificate it signs differs from a node's only by its name and extended key usage; issue client certificates from a CA of their own (--client-ca, docs/SECURITY.md)",
			"ca", cfg.TLS.CAFile, "client_ca", cfg.TLS.ClientCAFile)
	}
	s.reg.MustRegister(svc.Collectors()...)
	s.reg.MustRegister(raftPortCollectors(n)...)
	s.reg.MustRegister(s.api.Collectors()...)
	s.reg.MustRegister(apply, buildInfo(cfg.BuildVersion, cfg.BuildCommit),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "fencelock_raft_state", Help: "This node's raft state: 0 follower, 1 candidate, 2 leader, 3 shutdown.",
		}, func() float64 { return float64(n.Status().State) }),
		newPeerCollector(n))
	s.reg.MustRegister(guardCollectors(s.guard)...)
	svc.Start(n)
	// Calls that a change of the ACLs no longer allows end when this node
	// applies it.
	s.wg.Add(1)
	go func() { defer s.wg.Done(); s.guard.Run(s.stop) }()
	if cfg.TLSReload != nil {
		s.wg.Add(1)
		go s.reloadLoop(cfg.TLSReload)
	}
	return s, nil
}

// raftCredential is what the raft port runs mutual TLS with: the cluster
// secret's authority when there is a secret, else the TLS files' CA when
// there are TLS files; nil for none. A raft port with none runs only
// with InsecureRaft (Validate), and says so.
func (s *Server) raftCredential() (raftport.PeerTLS, error) {
	cfg := s.cfg
	port := cfg.RaftAddr != "" && cfg.Transport == nil
	switch {
	case cfg.ClusterSecret != nil:
		c, err := clustersecret.NewCredential(*cfg.ClusterSecret, cfg.PreviousClusterSecret, cfg.NodeID)
		if err != nil {
			return nil, fmt.Errorf("server: %w", err)
		}
		if port {
			attrs := []any{"fingerprint", cfg.ClusterSecret.Fingerprint()}
			if cfg.PreviousClusterSecret != nil {
				attrs = append(attrs, "previous", cfg.PreviousClusterSecret.Fingerprint())
			}
			s.log.Info("raft port: peers prove the cluster secret (mutual TLS 1.3)", attrs...)
		}
		return c, nil
	case s.tls != nil:
		return s.tls, nil
	}
	if port {
		s.log.Warn("raft port without a credential (--insecure-raft): any process that reaches it is taken for a member and can forge the cluster's log; give every node --cluster-secret-file", "raft", cfg.RaftAddr)
	}
	return nil, nil
}

// checkClusterData refuses a node with no raft port and no credential
// whose data holds a configuration of more than one voter: it belongs
// to a cluster, which it can reach only over a raft port, and that
// needs a credential. (A node given a raft port without one is refused
// before: Validate.)
func (s *Server) checkClusterData(peerTLS raftport.PeerTLS) error {
	cfg := s.cfg
	if peerTLS != nil || cfg.InsecureRaft || cfg.Transport != nil || cfg.RaftAddr != "" {
		return nil
	}
	servers, err := s.node.Configuration()
	if err != nil {
		return nil
	}
	voters := 0
	for _, sv := range servers {
		if sv.Voter {
			voters++
		}
	}
	if voters > 1 {
		return fmt.Errorf("server: the data in %s belongs to a cluster of %d voters; start this node with its raft address (--raft) and the cluster's secret (--cluster-secret-file)", cfg.DataDir, voters)
	}
	return nil
}

// engineNode is what the server holds of its node, whichever engine runs
// it: the service's Replicator, the raft port's accounting, and Close.
type engineNode interface {
	replica.Replicator
	RaftPortStats() raftport.Stats
	Close() error
}

// openNode opens a node of engine (Config.Engine) over f; trans, for the
// hashicorp engine only, replaces its raft port (Config.Transport).
func openNode(engine string, trans hashicorp.Transport, cfg node.Config, f *fsm.FSM) (engineNode, error) {
	if engine == node.EngineEtcd {
		return etcd.Open(cfg, f)
	}
	return hashicorp.Open(cfg, f, trans)
}

// Handler is the HTTP API.
func (s *Server) Handler() http.Handler { return s.api.Handler() }

// Calls is the framed connections' binary adapter: give it to
// framing.Server.Calls next to Handler.
func (s *Server) Calls() framing.CallHandler { return s.api.Calls() }

// Close stops the leader's timers and raft and closes the stores. Call it
// after the HTTP server has stopped.
func (s *Server) Close() error {
	s.once.Do(func() { close(s.stop) })
	s.Service.Close()
	s.wg.Wait()
	s.guard.Close()
	s.peers.close()
	return s.node.Close()
}

// Serve answers HTTP on ln until ctx ends, then shuts down gracefully: it
// stops accepting, ends waits, lets in-flight requests finish (up to
// grace), and closes the server.
func Serve(ctx context.Context, ln net.Listener, cfg Config, grace time.Duration) error {
	if cfg.ClientAddr == "" {
		cfg.ClientAddr = ln.Addr().String()
	}
	if err := loopbackCheck(cfg, "client", ln.Addr()); err != nil {
		ln.Close()
		return err
	}
	s, err := New(cfg)
	if err != nil {
		ln.Close()
		return err
	}
	switch {
	case cfg.TLS.Enabled() || cfg.Insecure:
	case cfg.ClusterSecret != nil || cfg.RaftAddr == "":
		s.log.Info("no TLS: the client port serves loopback addresses only")
	default:
		s.log.Info("no TLS: the client and raft ports serve loopback addresses only")
	}
	cfg = cfg.withDefaults()
	if cfg.MaxConnections > 0 || cfg.MaxConnectionsPerAddr > 0 {
		total := cfg.MaxConnections
		if total == 0 {
			total = math.MaxInt32
		}
		cl := newConnLimiter(ln, total, cfg.MaxConnectionsPerAddr, s.log)
		s.reg.MustRegister(cl.collectors()...)
		ln = cl
	}
	hb := newHeaderBudget(cfg.HeaderBudgetPerAddr, cfg.HeaderBudget, s.log)
	s.reg.MustRegister(hb.collectors()...)
	hs := &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		// Bounds a slow request body. It does not cut long waits: the
		// server clears the read deadline once the body has been read.
		ReadTimeout: 30 * time.Second,
		IdleTimeout: 2 * time.Minute,
		// Headers arrive before authentication: net/http's default
		// allows a megabyte of them on every connection.
		MaxHeaderBytes: maxHeaderBytes,
		// And a budget of them per address and in all (headerBudget).
		ConnState: hb.connState,
		ErrorLog:  slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		// The sorting listener hands out wrapped connections, so
		// net/http cannot see a TLS one: carry its state (a client
		// certificate names a principal) in the context instead.
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return httpapi.WithConnTLS(ctx, unwrapHeaderConn(c))
		},
	}
	// One port serves HTTP and framed connections (internal/framing):
	// the same handler answers both.
	fs := &framing.Server{
		Handler:               s.Handler(),
		Calls:                 s.Calls(),
		Heavy:                 s.api.Heavy,
		MaxInFlight:           cfg.FramedMaxInFlight,
		MaxPriorityInFlight:   cfg.FramedMaxPriorityInFlight,
		MaxPendingAnswerBytes: cfg.FramedMaxPendingAnswerBytes,
		WriteTimeout:          cfg.FramedWriteTimeout,
		ReadTimeout:           cfg.FramedReadTimeout,
		IdleTimeout:           cfg.FramedIdleTimeout,
		// Nothing large before authentication: a connection that has
		// not named a principal (with ACLs on) sends small frames and
		// is closed soon when silent.
		Authenticated:              s.guard.Identified,
		MaxUnauthenticatedFrame:    cfg.FramedMaxUnauthenticatedFrame,
		UnauthenticatedIdleTimeout: cfg.FramedUnauthenticatedIdleTimeout,
		StallTimeout:               cfg.FramedStallTimeout,
		MaxBufferedPerAddr:         cfg.FramedMaxBufferedPerAddr,
	}
	s.reg.MustRegister(framedCollectors(fs)...)
	served := make(chan error, 1)
	// With TLS the handshake comes first; the sorting reads decrypted
	// bytes, in each connection's own goroutine.
	go func() { served <- hs.Serve(hb.listener(framing.Listen(s.wrapListener(ln), fs))) }()
	s.log.Info("serving", "listen", ln.Addr().String(), "data", cfg.DataDir, "tls", s.tls != nil, "dashboard", httpapi.DashboardURL(ln.Addr(), s.tls != nil))

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

// maxHeaderBytes bounds an HTTP request's headers (a browser's cookies
// for the host included).
const maxHeaderBytes = 64 << 10

// loopbackCheck refuses to serve what on addr without TLS, unless it is
// a loopback address or cfg.Insecure is set (raftport.CheckLoopback).
func loopbackCheck(cfg Config, what string, addr net.Addr) error {
	if cfg.TLS.Enabled() {
		return nil
	}
	return raftport.CheckLoopback(cfg.Insecure, what, addr)
}

// serviceConfig is what the service takes of cfg (with its defaults).
func serviceConfig(cfg Config, peers service.Peers) service.Config {
	return service.Config{
		NodeID: cfg.NodeID, ClientAddr: cfg.ClientAddr, Clock: cfg.Clock, Logger: cfg.Logger, Peers: peers,
		ApplyTimeout: cfg.ApplyTimeout, MinTickInterval: cfg.MinTickInterval, ClockCheckpoint: cfg.ClockCheckpoint,
		JoinCatchUp: cfg.JoinCatchUp, AnnounceEvery: cfg.HeartbeatTimeout, Join: cfg.Joining, Engine: engineName(cfg.Engine),
		// -1 in Config is no cap: 0 in the wait commands.
		MaxWaitersPerKey: max(cfg.MaxWaitersPerKey, 0), MaxWaiters: max(cfg.MaxWaiters, 0),
		WatchHistory: cfg.WatchHistory, WatchMaxWatchers: cfg.WatchMaxWatchers, WatchMaxPerCaller: cfg.WatchMaxPerCaller,
		QuotaSessions: cfg.MaxSessionsPerPrincipal, QuotaLocks: cfg.MaxLocksPerPrincipal, QuotaWaiters: cfg.MaxWaitersPerPrincipal,
		QuotaKeyWaiters: max(cfg.MaxWaitersPerKeyPerPrincipal, 0),
	}
}

// engineName is the engine Config.Engine names ("" is the default).
func engineName(e string) string {
	if e == "" {
		return node.EngineHashicorp
	}
	return e
}

func nodePeers(ps []Peer) []node.Peer {
	out := make([]node.Peer, len(ps))
	for i, p := range ps {
		out[i] = node.Peer(p)
	}
	return out
}
