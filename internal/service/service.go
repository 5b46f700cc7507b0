package service

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/clock"
	"github.com/fencelock/fencelock/internal/eventlog"
	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/locktable"
	"github.com/fencelock/fencelock/internal/membership"
	"github.com/fencelock/fencelock/internal/replica"
	"github.com/fencelock/fencelock/internal/service/servicemetrics"
	"github.com/prometheus/client_golang/prometheus"
)

// Config is what the service needs. It has no defaults of its own: the
// server wiring resolves every field from its Config (internal/server),
// and tests give each one.
type Config struct {
	NodeID string
	// ClientAddr is where clients reach this node; the leader records it
	// so followers can name it in not_leader answers. Empty: none.
	ClientAddr string
	Clock      clock.Clock // lease time and lease timers
	Logger     *slog.Logger
	// Peers calls other nodes' client ports (join probes, announcements);
	// nil: this node cannot reach any.
	Peers Peers

	ApplyTimeout    time.Duration // how long a proposal waits to be enqueued
	MinTickInterval time.Duration // spacing of the expiry timer's ticks
	ClockCheckpoint time.Duration // the longest cluster time goes unrecorded while anything is held
	JoinCatchUp     time.Duration // how long a joining node may take to catch up
	// AnnounceEvery is how often a follower checks that the members table
	// has its client address (the heartbeat timeout).
	AnnounceEvery time.Duration
	// Join, for a node started to join a cluster, is how its join goes;
	// until the node is a member, a not-ready answer (/readyz) says that
	// rather than "knows no leader yet". Nil: not joining.
	Join *membership.JoinStatus
	// Engine is this node's replication engine, as its identity names it
	// (a join of a node of another engine is refused); "": not said.
	Engine string

	// Queue caps: the waiters on one key and on all keys; 0: no cap.
	MaxWaitersPerKey int
	MaxWaiters       int
	// Watches: the events kept for watchers to resume from (> 0), and
	// the watches open on this node in all and per caller (0: no cap).
	WatchHistory      int
	WatchMaxWatchers  int
	WatchMaxPerCaller int

	// Quotas of one principal (0: none): open sessions, leases held plus
	// places in wait queues, places in wait queues. The leader checks
	// them before it proposes (quota.go).
	QuotaSessions int
	QuotaLocks    int
	QuotaWaiters  int
	// QuotaKeyWaiters caps a principal's places in one key's wait queue
	// (0: none). It travels in each wait command, as the queue caps do,
	// so that every node refuses the same waits.
	QuotaKeyWaiters int
}

// Peers is how this node calls the client port of another node.
type Peers interface {
	membership.Peers // join probes, announcements, the leader's members view
	// ACLRevision asks the leader at clientAddr for the revision of its
	// ACL tables (Service.ACLRevision).
	ACLRevision(ctx context.Context, clientAddr string) (api.ACLRevision, error)
}

// Service is the lock service of one node: the operations over the
// replicated state machine, proposed through a replica.Replicator. Create it
// with New, open the node over FSM, and Start it.
type Service struct {
	cfg     Config
	log     *slog.Logger
	fsm     *fsm.FSM
	node    replica.Replicator
	metrics *servicemetrics.Set
	cluster *membership.Cluster
	waiters *waitRegistry
	quotas  quotas
	watches *eventlog.Log
	clock   clusterClock // the cluster clock, and the local clock it runs on (clock.clk)
	// becameReady is closed (and replaced) each time this node becomes a
	// ready leader: calls waiting on a question to the former leader go
	// on with this node's own tables then.
	becameReady broadcast

	ready       atomic.Bool // leader, caught up, orphans dropped
	aclCaughtUp atomic.Bool
	// clusterKnown: this node has applied its cluster's identity (inCluster).
	clusterKnown atomic.Bool
	counting     atomic.Bool   // count table events in metrics
	closing      chan struct{} // closed by BeginShutdown
	stop         chan struct{} // closed by Close
	once         sync.Once
	wg           sync.WaitGroup
}

// New makes a service and its state machine (FSM), which is empty until
// the node over it applies the log. Nothing runs until Start.
func New(cfg Config) (*Service, error) {
	if cfg.Clock == nil || cfg.Logger == nil {
		return nil, errors.New("service: config: Clock and Logger are required")
	}
	if cfg.ApplyTimeout <= 0 || cfg.MinTickInterval <= 0 || cfg.ClockCheckpoint <= 0 || cfg.JoinCatchUp <= 0 || cfg.WatchHistory <= 0 {
		return nil, errors.New("service: config: ApplyTimeout, MinTickInterval, ClockCheckpoint, JoinCatchUp and WatchHistory must be positive")
	}
	if cfg.ClientAddr != "" && cfg.AnnounceEvery <= 0 {
		return nil, errors.New("service: config: AnnounceEvery must be positive with a ClientAddr")
	}
	s := &Service{
		cfg:     cfg,
		log:     cfg.Logger,
		closing: make(chan struct{}),
		stop:    make(chan struct{}),
	}
	s.clock.clk = cfg.Clock
	s.fsm = fsm.New(s.observe)
	s.fsm.OnApplied(s.applied)
	s.cluster = membership.New(membership.Config{
		NodeID: cfg.NodeID, ClientAddr: cfg.ClientAddr, Logger: cfg.Logger, Peers: cfg.Peers,
		ApplyTimeout: cfg.ApplyTimeout, JoinCatchUp: cfg.JoinCatchUp, AnnounceEvery: cfg.AnnounceEvery, Join: cfg.Join,
		Engine: cfg.Engine,
	}, s.fsm, clusterSide{s})
	s.metrics = servicemetrics.New(servicemetrics.Sources{
		QueuedCount:   s.fsm.QueuedCount,
		LastToken:     s.fsm.LastToken,
		SessionStats:  s.fsm.SessionStats,
		EachLiveLease: s.eachLiveLease,
		Extra:         quotaCollectors(cfg),
	})
	s.waiters = newWaitRegistry(func(n int) { s.metrics.Waiters.Set(float64(n)) })
	s.watches = eventlog.New(cfg.WatchHistory, cfg.WatchMaxWatchers, cfg.WatchMaxPerCaller, func(n int) { s.metrics.Watchers.Set(float64(n)) })
	return s, nil
}

// FSM is the state machine the node applies the log to.
func (s *Service) FSM() *fsm.FSM { return s.fsm }

// Restored tells the service that a snapshot replaced the state machine
// (node.Hooks.Restored): the watch history starts over from it.
func (s *Service) Restored() { s.watches.Restored(s.fsm.AppliedIndex()) }

// Start runs the service over n: the watchers' broadcast, the leader's
// duties whenever n leads, and, with a client address, the announcements
// that keep the members table current.
func (s *Service) Start(n replica.Replicator) {
	s.node = n
	// Membership first: a leadership already won runs the takeover,
	// which asks it to record this node (RecordSelf), at once.
	s.cluster.Start(n)
	s.wg.Add(1)
	go func() { defer s.wg.Done(); s.watches.Broadcast(s.stop) }()
	s.wg.Add(1)
	go s.watchLeadership()
}

// Ready reports whether this node serves writes.
func (s *Service) Ready() bool { return s.ready.Load() }

// WaitReady blocks until the service is ready or ctx ends.
func (s *Service) WaitReady(ctx context.Context) error {
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
// cancelled and they answer 503) and open watches end, so that a
// transport's shutdown does not wait for them. Other requests finish
// normally.
func (s *Service) BeginShutdown() {
	s.once.Do(func() { close(s.closing) })
}

// Closing is closed once BeginShutdown has been called.
func (s *Service) Closing() <-chan struct{} { return s.closing }

// Close stops the leader's duties and the service's goroutines. Call it
// after the transports have drained and before the node is closed.
func (s *Service) Close() {
	s.BeginShutdown()
	close(s.stop)
	s.cluster.Close()
	s.wg.Wait()
}

// observe runs inside the state machine's Apply.
func (s *Service) observe(index uint64, ev locktable.Event) {
	if s.counting.Load() {
		s.metrics.Observe(ev)
	}
	if ev.Kind == locktable.EventGranted || ev.Kind == locktable.EventWaitDropped {
		s.waiters.deliver(index, ev)
	}
	s.watches.Append(index, ev)
}

// applied runs inside the state machine's Apply and ApplyBatch, after
// the batch's last event: the waiting requests and the watchers learn
// the batch's events together, once.
func (s *Service) applied() {
	s.waiters.flush()
	s.watches.Publish()
}

// eachLiveLease calls fn with the key of every lease held now, for
// fencelock_leases: at the running cluster clock on the leader, at the last
// applied cluster time elsewhere.
func (s *Service) eachLiveLease(fn func(key string)) {
	now, ok := s.clock.now()
	if !ok {
		now = s.fsm.Now()
	}
	s.fsm.EachLive(now, fn)
}

// Collectors are the service's metrics, for the server's registry.
func (s *Service) Collectors() []prometheus.Collector { return s.metrics.Collectors() }
