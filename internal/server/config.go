package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/clock"
	"github.com/fencelock/fencelock/internal/clustersecret"
	"github.com/fencelock/fencelock/internal/framing"
	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/httpapi"
	"github.com/fencelock/fencelock/internal/membership"
	"github.com/fencelock/fencelock/internal/node"
	"github.com/fencelock/fencelock/internal/node/hashicorp"
	"github.com/fencelock/fencelock/internal/tlsconfig"
)

// The server's configuration in one place: the type, its defaults and
// its validation. The packages below it (node, service, httpapi) take
// what they need from it, resolved, and keep no defaults of their own.

// Config configures a Server. The zero value plus a DataDir is a durable
// single-node server; see DefaultConfig for the values zero fields take.
type Config struct {
	// DataDir holds the raft log (wal/), snapshots (snapshots/) and a LOCK
	// file that keeps a second server out. Empty means
	// in-memory stores: nothing survives the process (tests only).
	DataDir string
	// NodeID names this node in the raft configuration.
	NodeID string
	// Engine is the replication engine: "" or node.EngineHashicorp
	// (hashicorp/raft), or node.EngineEtcd (etcd-io/raft, issue 28,
	// experimental). A data dir belongs to the engine
	// that first started on it; the other refuses it.
	Engine string
	// AsyncLogWrites has the etcd engine write its log off raft's
	// goroutine (node.Config.AsyncLogWrites); the hashicorp engine
	// ignores it.
	AsyncLogWrites bool
	// RaftAddr is the address raft peers dial. Empty means an in-memory
	// transport: a single node that talks to no one.
	RaftAddr string
	// ClientAddr is the host:port clients reach this node's HTTP API at.
	// The leader records it in the replicated state so that followers can
	// name it in not_leader answers.
	ClientAddr string
	// Peers, when this node has no raft state yet, is the initial voter
	// set (it must include this node); every node of a new cluster may be
	// started with the same list. Empty means a single voter: this node.
	Peers []Peer
	// Join: with no raft state yet, bootstrap nothing and wait for a
	// leader to add this node (fencelock cluster join).
	Join bool
	// TokenFloor is a floor this node's next term as leader commits
	// before any grant: every token the cluster issues from then on is
	// above it (a cluster rebuilt from scratch, or a data dir restored
	// from an old backup, goes above the tokens its resources have seen).
	// A floor at or below the tokens this node's state shows issued
	// changes nothing (node.Storage.Boot); at most node.MaxFloor.
	TokenFloor uint64
	// Joining, with Join, is how the join goes, as whoever asks the
	// cluster to add this node tells it; /readyz answers it until the
	// node is a member. Nil: nothing to say.
	Joining *membership.JoinStatus
	// Transport replaces the one RaftAddr would make (tests use raft's
	// in-memory transport to partition a cluster in-process).
	Transport hashicorp.Transport
	// TLS, when it names files, turns TLS on for the client port (Serve)
	// and the raft transport, where peers authenticate each other with
	// client certificates signed by TLS.CAFile.
	TLS tlsconfig.Files
	// ClusterSecret, when set, is the raft port's credential
	// (--cluster-secret-file): every raft connection, in and out, and the
	// join probe run mutual TLS 1.3 with node certificates of the
	// authority the secret derives (internal/clustersecret), so a process
	// without it is refused at the handshake. It takes the place of peer
	// TLS on the raft port: TLS's files then serve the client port only.
	ClusterSecret *clustersecret.Secret
	// PreviousClusterSecret, with ClusterSecret, is accepted from peers
	// too: the window of a rolling rotation (docs/OPERATIONS.md).
	PreviousClusterSecret *clustersecret.Secret
	// InsecureRaft allows a raft port with neither ClusterSecret nor
	// peer TLS (--insecure-raft): any process that reaches it is taken
	// for a member and can forge the log. New logs a warning.
	InsecureRaft bool
	// TLSReload: each value received rereads the TLS files, as ReloadTLS
	// does (the server command sends one on SIGHUP). nil: none.
	TLSReload <-chan struct{}
	// Insecure allows serving the client port or the raft port on an
	// address other than loopback without TLS.
	Insecure bool
	// AllowedHosts are names besides the advertised one (ClientAddr),
	// localhost and IP addresses that an HTTP request's Host may carry;
	// any other Host is refused 403 host_not_allowed, since a page that
	// rebinds its own name to this server sends that name (hostCheck).
	// "*" takes any Host.
	AllowedHosts []string
	// raftListener, if set, is the listener the TLS raft transport
	// accepts on instead of one on RaftAddr (tests: ports chosen first).
	raftListener net.Listener

	Logger *slog.Logger
	// BuildVersion and BuildCommit label fencelock_build_info. Empty: the
	// module version and vcs.revision of the binary's build info.
	BuildVersion, BuildCommit string
	// Clock is what the server measures lease and cluster time by and
	// schedules lease work on (expiry ticks, the clock checkpoint, wait
	// backstops, the orphan grace). nil is the real clock. Raft's own
	// timing and commit-latency metrics stay on real time. Expiry ticks
	// are spaced MinTickInterval apart on this clock: a test with a fake
	// clock that wants a waiter granted the moment the lease before it
	// expires sets MinTickInterval to 1ns.
	Clock clock.Clock
	// Authorizer, if set, is asked before every routed request runs
	// (the seam where authentication and authorization go); nil allows
	// everything.
	Authorizer httpapi.Authorizer
	// AuthToken is the bearer token this node sends on its own calls to
	// the leader (announcing its client address), needed once the
	// cluster's ACLs are on: a principal with admin (docs/SECURITY.md).
	AuthToken string

	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	// SnapshotThreshold and TrailingLogs bound the log: a snapshot is taken
	// once this many entries follow the last one, keeping TrailingLogs.
	SnapshotThreshold uint64
	TrailingLogs      uint64
	SnapshotInterval  time.Duration
	// ApplyTimeout bounds how long a proposal waits to be enqueued.
	ApplyTimeout time.Duration
	// MinTickInterval spaces the expiry timer's Tick proposals so that a
	// burst of expiries costs a few log entries, not one per lease.
	MinTickInterval time.Duration
	// JoinCatchUp bounds how long a join waits for the new node, added as
	// a non-voter, to catch up before it is promoted to voter; one that
	// has not stays a non-voter (join it again to promote it).
	JoinCatchUp time.Duration
	// sseWriteTimeout, when set, replaces the 10 s after which an event
	// stream whose peer takes no bytes is dropped (tests).
	sseWriteTimeout time.Duration
	// dialRaft checks that a raft address accepts connections before a
	// join; nil is a TCP dial on raft's TCP transport and nothing on a
	// Transport given here (tests set their own).
	dialRaft func(ctx context.Context, addr string) error
	// ClockCheckpoint: while any lease or waiter exists, the leader makes
	// sure the log records cluster time at least this often (a Tick when
	// nothing else was committed). A restart resumes from the last
	// recorded time, so it extends live leases by at most its own downtime
	// plus this interval.
	ClockCheckpoint time.Duration
	// MaxWaitersPerKey and MaxWaiters cap the wait queues: the waiters on
	// one key and on all keys. A wait that would go past either is
	// answered 429 too_many_waiters and changes nothing. The leader puts
	// its limits in each wait command, so every node refuses the same
	// waits. 0 means the default (1,000 and 100,000); -1 means no cap.
	MaxWaitersPerKey int
	MaxWaiters       int
	// MaxConnections caps the client connections Serve keeps open; one
	// over it is answered 503 too_many_connections and closed. 0 means no
	// cap (the server command sets one from the open-file limit:
	// ConnectionCap).
	MaxConnections int
	// MaxConnectionsPerAddr caps the client connections from one remote
	// address (IP), so one host cannot take the whole MaxConnections; one
	// over it is answered 503 too_many_connections and closed. 0 means a
	// quarter of MaxConnections (at least 1), or no cap when MaxConnections
	// is 0.
	MaxConnectionsPerAddr int
	// The raft port's own budgets, apart from the client port's
	// (docs/SECURITY.md): MaxRaftConnections caps the connections raft
	// holds (peers past their handshake), MaxRaftHandshakes the
	// handshakes in progress (past it the oldest of the address holding
	// the most, among those that have not proved the credential, is
	// closed to make room), RaftHandshakeTimeout each handshake. What is
	// closed is counted (fencelock_raft_connections_refused_total) and
	// summed up in a log line at most every 10 s. 0 means the defaults
	// (128, 32, 5 s; the server command sizes the caps from the open-file
	// limit: RaftConnectionCaps).
	MaxRaftConnections   int
	MaxRaftHandshakes    int
	RaftHandshakeTimeout time.Duration
	// Limits of each framed connection (internal/framing; docs/OPERATIONS.md,
	// Limits). FramedMaxInFlight requests may be unanswered at once, and
	// FramedMaxPriorityInFlight extends and releases besides; an answer
	// counts until it is written. Past FramedMaxPendingAnswerBytes of
	// answers waiting to be written the server stops reading the
	// connection, and a peer that takes no bytes for FramedWriteTimeout is
	// cut off. A frame started must arrive within FramedReadTimeout; a
	// connection with nothing in flight that sends nothing for
	// FramedIdleTimeout is closed.
	FramedMaxInFlight           int
	FramedMaxPriorityInFlight   int
	FramedMaxPendingAnswerBytes int64
	FramedWriteTimeout          time.Duration
	FramedReadTimeout           time.Duration
	FramedIdleTimeout           time.Duration
	// Before authentication (docs/SECURITY.md): with ACLs on, a framed
	// connection that has named no principal sends frames of at most
	// FramedMaxUnauthenticatedFrame bytes and is closed after
	// FramedUnauthenticatedIdleTimeout without one. Any frame whose
	// bytes stop arriving for FramedStallTimeout is cut, and the frames
	// being read from one address hold at most FramedMaxBufferedPerAddr
	// bytes. 0 means the defaults (8 KiB, 10 s, 5 s, 16 MiB).
	FramedMaxUnauthenticatedFrame    int
	FramedUnauthenticatedIdleTimeout time.Duration
	FramedStallTimeout               time.Duration
	FramedMaxBufferedPerAddr         int64
	// HTTP requests' headers before any handler (so before
	// authentication) run: past each request's first 4 KiB, the bytes
	// read while a request's headers arrive come from its remote
	// address's HeaderBudgetPerAddr and the server's HeaderBudget, and
	// go back once the headers are complete; a connection that finds no
	// room is answered 503 too_many_connections and closed. 0 means the
	// defaults (1 MiB and 16 MiB).
	HeaderBudgetPerAddr int64
	HeaderBudget        int64
	// WALSegmentSize is the size of each preallocated log segment file;
	// 0 means 16 MiB. Tests make it small to rotate segments often.
	WALSegmentSize int

	// Watches. WatchHistory is how many of the latest
	// events a node keeps for watchers to resume from (0: 10,000; an
	// event costs about 100 bytes besides its key and holder, so the
	// default holds at most about 14 MB with maximal keys). A watcher
	// further behind is answered compacted. WatchMaxWatchers caps the
	// watches open on the node (0: 10,000) and WatchMaxPerCaller those
	// of one principal, or of one remote host without ACLs (0: 1,000);
	// one past either is answered 429 too_many_watchers. -1 means no cap.
	WatchHistory      int
	WatchMaxWatchers  int
	WatchMaxPerCaller int

	// Quotas of one principal, once ACLs are on (docs/OPERATIONS.md,
	// Limits): its open sessions (0: 4,096), its leases held plus places
	// in wait queues (0: 65,536), its places in wait queues (0: 10,000).
	// The leader answers a call that would go past one 429
	// quota_exceeded, naming it, and changes nothing; so one principal,
	// whatever holder names it uses, cannot fill a table-wide cap
	// (1,048,576 sessions, MaxWaiters) and lock the others out. Its
	// watches are WatchMaxPerCaller. -1 means no quota.
	MaxSessionsPerPrincipal int
	MaxLocksPerPrincipal    int
	MaxWaitersPerPrincipal  int
	// MaxWaitersPerKeyPerPrincipal caps one principal's places in one
	// key's wait queue, so that it cannot take the whole MaxWaitersPerKey
	// and have everybody else answered 429 there: past it a wait is
	// answered 429 quota_exceeded (quota "key_waiters"). The leader puts
	// it in each wait command of a principal, so every node refuses the
	// same waits. 0 means a quarter of MaxWaitersPerKey (at least 1; none
	// when that has no cap); -1 means none.
	MaxWaitersPerKeyPerPrincipal int
}

// DefaultConfig returns the values used for zero fields.
func DefaultConfig() Config {
	return Config{
		NodeID: "fencelock-1",
		// A failover must fit in the 1.5 s the client's keep-alive leaves
		// between a due extension and its give-up point (client/budget.go,
		// docs/RELIABILITY.md "The safe-stop rule"): these fail over in 0.7-1.3 s, raft's own
		// 1s/1s/500ms in 1.3-2.6 s. The leader lease was 250ms, and a
		// leader starved of CPU for that long stepped down; 500ms is as
		// long as raft allows with this heartbeat (docs/OPERATIONS.md).
		HeartbeatTimeout:   500 * time.Millisecond,
		ElectionTimeout:    500 * time.Millisecond,
		LeaderLeaseTimeout: 500 * time.Millisecond,
		SnapshotThreshold:  4096,
		TrailingLogs:       1024,
		SnapshotInterval:   10 * time.Second,
		ApplyTimeout:       5 * time.Second,
		MinTickInterval:    5 * time.Millisecond,
		ClockCheckpoint:    time.Second,
		JoinCatchUp:        10 * time.Second,

		FramedMaxInFlight:           framing.DefaultMaxInFlight,
		FramedMaxPriorityInFlight:   framing.DefaultMaxPriorityInFlight,
		FramedMaxPendingAnswerBytes: framing.DefaultMaxPendingAnswerBytes,
		FramedWriteTimeout:          framing.DefaultWriteTimeout,
		FramedReadTimeout:           framing.DefaultReadTimeout,
		FramedIdleTimeout:           framing.DefaultIdleTimeout,
		HeaderBudgetPerAddr:         DefaultHeaderBudgetPerAddr,
		HeaderBudget:                DefaultHeaderBudget,
		MaxWaitersPerKey:            1000,
		MaxWaiters:                  100000,

		WatchHistory:      10000,
		WatchMaxWatchers:  10000,
		WatchMaxPerCaller: 1000,

		MaxSessionsPerPrincipal: 4096,
		MaxLocksPerPrincipal:    65536,
		MaxWaitersPerPrincipal:  10000,
	}
}

// Peer is one voter of an initial cluster.
type Peer struct {
	ID       string
	RaftAddr string
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.NodeID == "" {
		c.NodeID = d.NodeID
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Clock == nil {
		c.Clock = clock.System{}
	}
	setDur := func(p *time.Duration, v time.Duration) {
		if *p == 0 {
			*p = v
		}
	}
	setDur(&c.HeartbeatTimeout, d.HeartbeatTimeout)
	setDur(&c.ElectionTimeout, d.ElectionTimeout)
	setDur(&c.LeaderLeaseTimeout, d.LeaderLeaseTimeout)
	setDur(&c.SnapshotInterval, d.SnapshotInterval)
	setDur(&c.ApplyTimeout, d.ApplyTimeout)
	setDur(&c.MinTickInterval, d.MinTickInterval)
	setDur(&c.ClockCheckpoint, d.ClockCheckpoint)
	setDur(&c.JoinCatchUp, d.JoinCatchUp)
	setDur(&c.FramedWriteTimeout, d.FramedWriteTimeout)
	setDur(&c.FramedReadTimeout, d.FramedReadTimeout)
	setDur(&c.FramedIdleTimeout, d.FramedIdleTimeout)
	if c.FramedMaxInFlight == 0 {
		c.FramedMaxInFlight = d.FramedMaxInFlight
	}
	if c.FramedMaxPriorityInFlight == 0 {
		c.FramedMaxPriorityInFlight = d.FramedMaxPriorityInFlight
	}
	if c.FramedMaxPendingAnswerBytes == 0 {
		c.FramedMaxPendingAnswerBytes = d.FramedMaxPendingAnswerBytes
	}
	if c.HeaderBudgetPerAddr == 0 {
		c.HeaderBudgetPerAddr = d.HeaderBudgetPerAddr
	}
	if c.HeaderBudget == 0 {
		c.HeaderBudget = d.HeaderBudget
	}
	if c.MaxConnectionsPerAddr == 0 && c.MaxConnections > 0 {
		c.MaxConnectionsPerAddr = max(c.MaxConnections/4, 1)
	}
	if c.SnapshotThreshold == 0 {
		c.SnapshotThreshold = d.SnapshotThreshold
	}
	if c.TrailingLogs == 0 {
		c.TrailingLogs = d.TrailingLogs
	}
	if c.WALSegmentSize <= 0 {
		c.WALSegmentSize = node.WALSegmentSize
	}
	if c.MaxWaitersPerKey == 0 {
		c.MaxWaitersPerKey = d.MaxWaitersPerKey
	}
	if c.MaxWaiters == 0 {
		c.MaxWaiters = d.MaxWaiters
	}
	pick := func(v, def int) int {
		switch {
		case v == 0:
			return def
		case v < 0:
			return 0 // no cap
		}
		return v
	}
	c.WatchMaxWatchers, c.WatchMaxPerCaller = pick(c.WatchMaxWatchers, d.WatchMaxWatchers), pick(c.WatchMaxPerCaller, d.WatchMaxPerCaller)
	c.MaxSessionsPerPrincipal = pick(c.MaxSessionsPerPrincipal, d.MaxSessionsPerPrincipal)
	c.MaxLocksPerPrincipal = pick(c.MaxLocksPerPrincipal, d.MaxLocksPerPrincipal)
	c.MaxWaitersPerPrincipal = pick(c.MaxWaitersPerPrincipal, d.MaxWaitersPerPrincipal)
	if c.MaxWaitersPerKeyPerPrincipal == 0 && c.MaxWaitersPerKey > 0 {
		c.MaxWaitersPerKeyPerPrincipal = max(c.MaxWaitersPerKey/4, 1)
	}
	if c.WatchHistory == 0 {
		c.WatchHistory = d.WatchHistory
	}
	return c
}

// Validate reports what is wrong with c, naming the field; zero fields
// take their defaults (DefaultConfig) first. New calls it.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("server: config: "+format, args...))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"HeartbeatTimeout", c.HeartbeatTimeout},
		{"ElectionTimeout", c.ElectionTimeout},
		{"LeaderLeaseTimeout", c.LeaderLeaseTimeout},
		{"SnapshotInterval", c.SnapshotInterval},
		{"ApplyTimeout", c.ApplyTimeout},
		{"MinTickInterval", c.MinTickInterval},
		{"JoinCatchUp", c.JoinCatchUp},
		{"ClockCheckpoint", c.ClockCheckpoint},
		{"FramedWriteTimeout", c.FramedWriteTimeout},
		{"FramedReadTimeout", c.FramedReadTimeout},
		{"FramedIdleTimeout", c.FramedIdleTimeout},
		{"RaftHandshakeTimeout", c.RaftHandshakeTimeout},
		{"FramedUnauthenticatedIdleTimeout", c.FramedUnauthenticatedIdleTimeout},
		{"FramedStallTimeout", c.FramedStallTimeout},
	} {
		if d.v < 0 {
			bad("%s is %v; it must not be negative (0 is the default)", d.name, d.v)
		}
	}
	if c.MaxConnections < 0 {
		bad("MaxConnections is %d; it must not be negative (0 is no cap)", c.MaxConnections)
	}
	for _, n := range []struct {
		name string
		v    int64
	}{
		{"MaxConnectionsPerAddr", int64(c.MaxConnectionsPerAddr)},
		{"MaxRaftConnections", int64(c.MaxRaftConnections)},
		{"MaxRaftHandshakes", int64(c.MaxRaftHandshakes)},
		{"FramedMaxUnauthenticatedFrame", int64(c.FramedMaxUnauthenticatedFrame)},
		{"FramedMaxBufferedPerAddr", c.FramedMaxBufferedPerAddr},
		{"HeaderBudgetPerAddr", c.HeaderBudgetPerAddr},
		{"HeaderBudget", c.HeaderBudget},
		{"FramedMaxInFlight", int64(c.FramedMaxInFlight)},
		{"FramedMaxPriorityInFlight", int64(c.FramedMaxPriorityInFlight)},
		{"FramedMaxPendingAnswerBytes", c.FramedMaxPendingAnswerBytes},
	} {
		if n.v < 0 {
			bad("%s is %d; it must not be negative (0 is the default)", n.name, n.v)
		}
	}
	for _, h := range []struct {
		name string
		v    int64
	}{{"HeaderBudgetPerAddr", c.HeaderBudgetPerAddr}, {"HeaderBudget", c.HeaderBudget}} {
		if h.v > 0 && h.v < maxHeaderBytes {
			bad("%s is %d; it must hold one request's largest headers, %d bytes (0 is the default)", h.name, h.v, maxHeaderBytes)
		}
	}
	for _, w := range []struct {
		name string
		v    int
	}{{"MaxWaitersPerKey", c.MaxWaitersPerKey}, {"MaxWaiters", c.MaxWaiters}, {"MaxWaitersPerKeyPerPrincipal", c.MaxWaitersPerKeyPerPrincipal}} {
		if w.v < -1 || w.v > fsm.MaxWaitLimit {
			bad("%s is %d; it must be between 1 and %d (0 is the default, -1 no cap)", w.name, w.v, fsm.MaxWaitLimit)
		}
	}
	if c.WatchHistory < 0 || c.WatchHistory > maxWatchHistory {
		bad("WatchHistory is %d; it must be between 1 and %d (0 is the default)", c.WatchHistory, maxWatchHistory)
	}
	for _, w := range []struct {
		name string
		v    int
	}{{"WatchMaxWatchers", c.WatchMaxWatchers}, {"WatchMaxPerCaller", c.WatchMaxPerCaller},
		{"MaxSessionsPerPrincipal", c.MaxSessionsPerPrincipal}, {"MaxLocksPerPrincipal", c.MaxLocksPerPrincipal},
		{"MaxWaitersPerPrincipal", c.MaxWaitersPerPrincipal}} {
		if w.v < -1 {
			bad("%s is %d; it must be positive (0 is the default, -1 no cap)", w.name, w.v)
		}
	}
	if c.WALSegmentSize < 0 {
		bad("WALSegmentSize is %d; it must not be negative (0 is the default)", c.WALSegmentSize)
	}
	raftPort := c.RaftAddr != "" && c.Transport == nil
	if c.TLS.Enabled() {
		if err := c.TLS.Check(); err != nil {
			bad("TLS: %v", err)
		}
		if raftPort && c.ClusterSecret == nil && c.TLS.CAFile == "" {
			bad("TLS.CAFile is empty; raft over TLS needs the CA that signs the peers' certificates (or a ClusterSecret)")
		}
	}
	if c.PreviousClusterSecret != nil && c.ClusterSecret == nil {
		bad("PreviousClusterSecret is set without ClusterSecret; a rotation accepts the previous secret besides the current one")
	}
	if raftPort && c.ClusterSecret == nil && !c.TLS.Enabled() && !c.InsecureRaft {
		bad("RaftAddr %s has no credential: set ClusterSecret (--cluster-secret-file) or peer TLS, or InsecureRaft to let any process that reaches it forge the log", c.RaftAddr)
	}
	d := c.withDefaults()
	if d.LeaderLeaseTimeout > d.HeartbeatTimeout {
		bad("LeaderLeaseTimeout (%v) is longer than HeartbeatTimeout (%v); raft needs it no longer", d.LeaderLeaseTimeout, d.HeartbeatTimeout)
	}
	if len(d.NodeID) > api.MaxNodeIDLen {
		bad("NodeID is %d bytes; the limit is %d", len(d.NodeID), api.MaxNodeIDLen)
	}
	if len(c.ClientAddr) > api.MaxAddrLen {
		bad("ClientAddr is %d bytes; the limit is %d", len(c.ClientAddr), api.MaxAddrLen)
	}
	switch c.Engine {
	case "", node.EngineHashicorp:
	case node.EngineEtcd:
		if c.Transport != nil {
			bad("Engine %s has a raft port of its own: Transport (a hashicorp raft transport) must be nil", c.Engine)
		}
	default:
		bad("Engine is %q; it must be %s or %s", c.Engine, node.EngineHashicorp, node.EngineEtcd)
	}
	if c.Join && len(c.Peers) > 0 {
		bad("Join and Peers are both set; a node either bootstraps with the peer list or waits to be joined")
	}
	if c.TokenFloor > node.MaxFloor {
		bad("TokenFloor is %d; the limit is %d (tokens would run out)", c.TokenFloor, uint64(node.MaxFloor))
	}
	if len(c.Peers) > 0 {
		self := false
		ids := map[string]bool{}
		for i, p := range c.Peers {
			switch {
			case p.ID == "":
				bad("Peers[%d] has no ID", i)
			case p.RaftAddr == "":
				bad("Peers[%d] (%s) has no RaftAddr", i, p.ID)
			case ids[p.ID]:
				bad("Peers names %s twice", p.ID)
			}
			ids[p.ID] = true
			self = self || p.ID == d.NodeID
		}
		if !self {
			bad("Peers does not name this node (NodeID %s)", d.NodeID)
		}
	}
	return errors.Join(errs...)
}

// maxWatchHistory bounds Config.WatchHistory: a million events is about
// 100 MB besides their keys.
const maxWatchHistory = 1 << 20

// Clock is the time source of a server's lease work (Config.Clock).
type Clock = clock.Clock

// Timer is a call scheduled on a Clock.
type Timer = clock.Timer
