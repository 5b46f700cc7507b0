package node

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/raftlog"
	"github.com/fencelock/fencelock/internal/tlsconfig"
)

// Errors a proposal or a membership change can end with besides the
// command's own refusal.
var (
	// ErrNotLeader: this node does not lead, so it cannot propose.
	ErrNotLeader = errors.New("server: not the leader")
	// ErrUnavailable: raft is shutting down or could not take the
	// proposal, or this node cannot vouch for what it applied.
	ErrUnavailable = errors.New("server: unavailable")
)

// Config is what Open needs. It has no defaults of its own: the server
// wiring fills every field from its Config (internal/server).
type Config struct {
	// DataDir holds the raft log (wal/), snapshots (snapshots/), the
	// state file and a LOCK file. Empty: in-memory stores.
	DataDir  string
	NodeID   string
	RaftAddr string // empty: an in-memory transport nobody can dial
	// Peers is the initial voter set when there is no raft state yet;
	// empty means this node alone. Join: bootstrap nothing and wait to
	// be added.
	Peers []Peer
	Join  bool
	// Transport replaces the one RaftAddr would make (tests).
	Transport raft.Transport
	// TLS, when set, runs the raft port over mutual TLS.
	TLS *tlsconfig.Reloader
	// Insecure allows a raft port on a non-loopback address without TLS.
	Insecure bool
	// Listener, if set, is what the raft transport accepts on instead of
	// a listener on RaftAddr (tests: ports chosen first).
	Listener net.Listener
	// RaftPort bounds the raft port's connections and handshakes.
	RaftPort RaftPortLimits
	// DialRaft checks that a raft address accepts connections before a
	// join; nil: a TCP (or TLS) dial, and nothing on a Transport given
	// here.
	DialRaft func(ctx context.Context, addr string) error
	Logger   *slog.Logger

	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	SnapshotThreshold  uint64
	TrailingLogs       uint64
	SnapshotInterval   time.Duration
	WALSegmentSize     int
	// TokenFloor, when this node has no raft state yet, is a floor the
	// first leader commits before it serves a grant: every token it
	// issues is above it. Ignored once there is state.
	TokenFloor uint64

	Hooks Hooks
}

// Hooks are told what the state machine did; each may be nil.
type Hooks struct {
	// Applied is how long each log entry took to apply.
	Applied func(time.Duration)
	// Restored runs after a snapshot replaced the state.
	Restored func()
}

// Peer is one voter of an initial cluster.
type Peer struct {
	ID       string
	RaftAddr string
}

// WALSegmentSize is the default size of each preallocated log segment
// file.
const WALSegmentSize = 16 << 20

type closerFunc func() error

// openDataDir claims cfg.DataDir for engine and opens its stores,
// verified before raft reads them (openStores: damage refuses to start
// instead of losing or reissuing tokens), with the token ceiling over its
// state file and the checkpointer that records it. What must be closed
// is appended to closers, in the order it was opened.
func (f *floors) openDataDir(cfg Config, engine string, raftLog hclog.Logger, closers *[]io.Closer) (*stores, error) {
	unlock, err := claimDataDir(cfg.DataDir, engine)
	if err != nil {
		return nil, err
	}
	*closers = append(*closers, closerFunc(unlock))
	segSize := cfg.WALSegmentSize
	if segSize <= 0 {
		segSize = WALSegmentSize
	}
	st, err := openStores(cfg.DataDir, engine, segSize, raftLog, cfg.Logger)
	if err != nil {
		return nil, err
	}
	*closers = append(*closers, closerFunc(st.close))
	f.state = st.state
	f.floor = newTokenFloor(st.state)
	*closers = append(*closers, startCheckpointer(st.state, time.Second))
	return st, nil
}

// claimDataDir makes dir, takes its lock (one process per data
// directory: a second server fails at once instead of hanging on the
// stores' own file locks) and claims it for engine: a dir the other
// engine wrote holds entries this one would misread, and is refused.
func claimDataDir(dir, engine string) (unlock func() error, err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("server: data dir: %w", err)
	}
	unlock, err = lockDir(dir)
	if err != nil {
		return nil, err
	}
	if err := claimEngine(dir, engine); err != nil {
		_ = unlock()
		return nil, err
	}
	return unlock, nil
}

func (f closerFunc) Close() error { return f() }

// Node is one raft node over its stores: the replicated log the service
// proposes to (Replicator), and everything it must close.
type Node struct {
	cfg     Config
	raft    *raft.Raft
	fsm     *fsm.FSM
	addr    raft.ServerAddress // this node's raft address
	wal     *healingWAL        // nil with in-memory stores
	closers []io.Closer
	floors
	m     *Machine
	peers *peerWatch // what the peers answered this node's AppendEntries
	// lastLeader is the last leader raft named: raft forgets a leader it
	// stops hearing from, the health view does not.
	lastLeader atomic.Value // string
	// otherLeader is the last leader raft named that is not this node.
	otherLeader atomic.Value              // string
	gate        *portGate                 // the raft port's budgets; nil without one
	running     atomic.Pointer[raft.Raft] // set once raft has started: the raft port's members
	// startIndex is the last index of the log when the node opened it.
	startIndex uint64
	stop       chan struct{}
	wg         sync.WaitGroup
}

// Open opens the stores, bootstraps a configuration when there is no
// state yet (this node alone, or the configured peers; nothing when it is
// to be joined), and starts raft over f. A running cluster adds and
// removes voters on the leader (AddVoter, RemoveServer).
func Open(cfg Config, f *fsm.FSM) (*Node, error) {
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.NodeID)
	rc.Logger = raftlog.New(cfg.Logger.With("component", "raft"))
	rc.HeartbeatTimeout = cfg.HeartbeatTimeout
	rc.ElectionTimeout = cfg.ElectionTimeout
	rc.LeaderLeaseTimeout = cfg.LeaderLeaseTimeout
	rc.SnapshotThreshold = cfg.SnapshotThreshold
	rc.TrailingLogs = cfg.TrailingLogs
	rc.SnapshotInterval = cfg.SnapshotInterval
	// Proposals queue in a buffered channel instead of each waiting for the
	// leader loop: 2-4% more W1 cycles/s in three interleaved runs.
	rc.BatchApplyCh = true
	if err := raft.ValidateConfig(rc); err != nil {
		return nil, fmt.Errorf("server: raft config: %w", err)
	}

	n := &Node{cfg: cfg, fsm: f, stop: make(chan struct{})}
	var (
		logs   raft.LogStore
		stable raft.StableStore
		snaps  raft.SnapshotStore
	)
	if cfg.DataDir == "" {
		mem := raft.NewInmemStore()
		logs, stable, snaps = mem, mem, raft.NewInmemSnapshotStore()
	} else {
		st, err := n.openDataDir(cfg, EngineHashicorp, rc.Logger, &n.closers)
		if err != nil {
			n.close()
			return nil, err
		}
		logs, stable, snaps = st.logs, st.stable, st.snaps
		n.wal = st.wal
	}
	n.m = newMachine(f, n.floor, cfg.Hooks)

	if err := n.bootFloor(logs, stable, snaps); err != nil {
		n.close()
		return nil, err
	}
	trans, err := n.transport(rc)
	if err != nil {
		n.close()
		return nil, err
	}
	n.peers = newPeerWatch(time.Now)
	trans = watchTransport(trans, n.peers)
	if err := bootstrap(cfg, rc, logs, stable, snaps, trans); err != nil {
		n.close()
		return nil, err
	}
	// raft reads back every entry it replicates (recentLogs).
	r, err := raft.NewRaft(rc, raftFSM{n.m}, newRecentLogs(logs, recentLogsSize), stable, snaps, trans)
	if err != nil {
		n.close()
		return nil, fmt.Errorf("server: starting raft: %w", err)
	}
	n.raft, n.addr = r, trans.LocalAddr()
	n.lastLeader.Store("")
	n.otherLeader.Store("")
	// The filter runs in raft's goroutine and sends nothing: it only
	// notes the leader.
	r.RegisterObserver(raft.NewObserver(nil, false, func(o *raft.Observation) bool {
		if lo, ok := o.Data.(raft.LeaderObservation); ok && lo.LeaderID != "" {
			n.lastLeader.Store(string(lo.LeaderID))
			if string(lo.LeaderID) != cfg.NodeID {
				n.otherLeader.Store(string(lo.LeaderID))
			}
		}
		return false
	}))
	n.running.Store(r)
	n.startIndex = r.LastIndex()
	n.wg.Add(1)
	go func() { defer n.wg.Done(); n.m.ReturnFreedMemory(n.stop) }()
	return n, nil
}

// transport is the raft transport cfg asks for: the one given, an
// in-memory one without a raft address, TLS when configured, else TCP.
func (n *Node) transport(rc *raft.Config) (raft.Transport, error) {
	cfg := n.cfg
	switch {
	case cfg.Transport != nil:
		return cfg.Transport, nil
	case cfg.RaftAddr == "":
		_, mem := raft.NewInmemTransport(raft.ServerAddress(cfg.NodeID))
		return mem, nil
	case cfg.TLS == nil:
		var addr net.Addr
		if cfg.Listener != nil {
			addr = cfg.Listener.Addr()
		} else {
			a, err := net.ResolveTCPAddr("tcp", cfg.RaftAddr)
			if err != nil {
				return nil, fmt.Errorf("server: raft address: %w", err)
			}
			addr = a
		}
		if err := CheckLoopback(cfg.Insecure, "raft", addr); err != nil {
			return nil, err
		}
	}
	n.gate = newPortGate(cfg.RaftPort, cfg.Logger.With("component", "raft-port"))
	nt, err := newRaftTransport(cfg, rc.Logger, n.isMember, n.gate)
	if err != nil {
		return nil, fmt.Errorf("server: raft transport: %w", err)
	}
	n.closers = append(n.closers, nt)
	return nt, nil
}

// isMember says whether the raft port takes a peer named id: a member of
// the configuration. A node with no configuration yet (started to be
// joined) takes any node of the CA, since it cannot know its cluster
// before the leader reaches it; a node whose raft has not started takes
// none (peers retry).
func (n *Node) isMember(id string) bool {
	r := n.running.Load()
	if r == nil {
		return false
	}
	f := r.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	servers := f.Configuration().Servers
	if len(servers) == 0 {
		return true
	}
	for _, s := range servers {
		if string(s.ID) == id {
			return true
		}
	}
	return false
}

// RaftPortStats is the raft port's accounting; zero without a raft port
// (an in-memory or given transport).
func (n *Node) RaftPortStats() RaftPortStats {
	if n.gate == nil {
		return RaftPortStats{}
	}
	return n.gate.stats()
}

// bootstrap writes the first configuration when the stores hold no raft
// state and this node is not to be joined.
func bootstrap(cfg Config, rc *raft.Config, logs raft.LogStore, stable raft.StableStore, snaps raft.SnapshotStore, trans raft.Transport) error {
	has, err := raft.HasExistingState(logs, stable, snaps)
	if err != nil {
		return fmt.Errorf("server: reading raft state: %w", err)
	}
	if has || cfg.Join {
		return nil
	}
	boot := raft.Configuration{Servers: []raft.Server{{
		Suffrage: raft.Voter, ID: rc.LocalID, Address: trans.LocalAddr(),
	}}}
	if len(cfg.Peers) > 0 {
		boot.Servers = boot.Servers[:0]
		self := false
		for _, p := range cfg.Peers {
			if p.ID == cfg.NodeID && raft.ServerAddress(p.RaftAddr) != trans.LocalAddr() {
				return fmt.Errorf("server: the peer list gives this node (%s) the raft address %s, not %s",
					p.ID, p.RaftAddr, trans.LocalAddr())
			}
			self = self || p.ID == cfg.NodeID
			boot.Servers = append(boot.Servers, raft.Server{
				Suffrage: raft.Voter, ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.RaftAddr)})
		}
		if !self {
			return fmt.Errorf("server: the peer list does not name this node (%s)", cfg.NodeID)
		}
	}
	if err := raft.BootstrapCluster(rc, logs, stable, snaps, trans, boot); err != nil {
		return fmt.Errorf("server: bootstrap: %w", err)
	}
	return nil
}

// Close shuts raft down, then the stores it used.
func (n *Node) Close() error {
	close(n.stop)
	n.wg.Wait()
	return n.close()
}

func (n *Node) close() error {
	var errs []error
	if n.raft != nil {
		if err := n.raft.Shutdown().Error(); err != nil {
			errs = append(errs, err)
		}
	}
	for i := len(n.closers) - 1; i >= 0; i-- {
		if err := n.closers[i].Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Propose appends data, an encoded fsm.Command, to the log and waits
// until it is committed and applied here; it answers the state machine's
// result. The error is about the proposal (ErrNotLeader, ErrUnavailable,
// a *StorageError); the command's own refusal is in the result.
func (n *Node) Propose(data []byte, timeout time.Duration) (*fsm.Result, error) {
	f := n.raft.Apply(data, timeout)
	if err := f.Error(); err != nil {
		if notLeading(err) {
			return nil, fmt.Errorf("%w: %v", ErrNotLeader, err)
		}
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if err := n.durableErr(); err != nil {
		// The entry is committed but this node could not record the
		// token floor that covers it: do not answer it as a grant.
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	res, ok := f.Response().(*fsm.Result)
	if !ok {
		return nil, fmt.Errorf("%w: unexpected apply response %T", ErrUnavailable, f.Response())
	}
	return res, nil
}

func notLeading(err error) bool {
	return errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) ||
		errors.Is(err, raft.ErrLeadershipTransferInProgress)
}

// Barrier waits until every entry committed before it has been applied.
func (n *Node) Barrier(timeout time.Duration) error { return n.raft.Barrier(timeout).Error() }

// Leadership receives true when this node becomes leader and false when
// it stops being one.
func (n *Node) Leadership() <-chan bool { return n.raft.LeaderCh() }

// VerifyLeader confirms with a quorum that this node still leads.
func (n *Node) VerifyLeader() error {
	if err := n.raft.VerifyLeader().Error(); err != nil {
		return fmt.Errorf("%w: %v", ErrNotLeader, err)
	}
	return nil
}

// State is a node's raft state.
type State uint8

// The states, numbered as fencelock_raft_state reports them.
const (
	Follower State = iota
	Candidate
	Leader
	Shutdown
)

// Status is what this node knows of the cluster's leadership now.
type Status struct {
	State State
	// LeaderID is the leader this node knows of; "" if none.
	LeaderID string
	// LeaderSilent: this node is not the leader and has not heard from
	// one for a heartbeat timeout. raft keeps naming a dead leader until
	// an election starts; sending clients there only makes them fail.
	LeaderSilent bool
	// FormerLeader, when LeaderID is "", is the last leader this node
	// knew of, if another node: raft forgets a leader it has stopped
	// hearing from.
	FormerLeader string
	// Term is this node's current raft term.
	Term uint64
	// Fault is the log's unresolved write failure; nil when it writes.
	Fault *StorageError
}

// Status reads this node's state.
func (n *Node) Status() Status {
	_, id := n.raft.LeaderWithID()
	st := Status{State: State(n.raft.State()), LeaderID: string(id), Term: n.raft.CurrentTerm()}
	st.LeaderSilent = st.State != Leader && time.Since(n.raft.LastContact()) > n.cfg.HeartbeatTimeout
	if last, _ := n.lastLeader.Load().(string); st.LeaderID == "" && last != n.cfg.NodeID {
		st.FormerLeader = last
	}
	if n.wal != nil {
		st.Fault = n.wal.Fault()
	}
	return st
}

// AppliedIndex is the last index this node has applied (raft's count and
// the state machine's, whichever is further).
func (n *Node) AppliedIndex() uint64 { return max(n.raft.AppliedIndex(), n.fsm.AppliedIndex()) }

// CommitIndex is the last index known committed.
func (n *Node) CommitIndex() uint64 { return n.raft.CommitIndex() }

// StartIndex is the last index of the log when the node opened it.
func (n *Node) StartIndex() uint64 { return n.startIndex }

// Addr is this node's raft address.
func (n *Node) Addr() string { return string(n.addr) }

// Dialable says whether other nodes can reach this one's raft: a node
// started without a raft address runs on an in-memory transport nobody
// can dial.
func (n *Node) Dialable() bool { return n.cfg.Transport != nil || n.cfg.RaftAddr != "" }

// Snapshot takes a snapshot now (tests, operators).
func (n *Node) Snapshot() error { return n.raft.Snapshot().Error() }

// Server is one member of the raft configuration.
type Server struct {
	ID       string
	Addr     string
	Suffrage string // "Voter", "Nonvoter" or "Staging", as raft names them
	Voter    bool
}

// Configuration is the raft configuration as this node knows it.
func (n *Node) Configuration() ([]Server, error) {
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, n.changeErr(err)
	}
	var out []Server
	for _, s := range f.Configuration().Servers {
		out = append(out, Server{ID: string(s.ID), Addr: string(s.Address), Suffrage: s.Suffrage.String(),
			Voter: s.Suffrage == raft.Voter})
	}
	return out, nil
}

// AddNonvoter adds a node that counts for no quorum (or moves one to a
// new address).
func (n *Node) AddNonvoter(id, addr string, timeout time.Duration) error {
	return n.changeErr(n.raft.AddNonvoter(raft.ServerID(id), raft.ServerAddress(addr), 0, timeout).Error())
}

// AddVoter adds a voter, promotes a non-voter, or moves a voter's address.
func (n *Node) AddVoter(id, addr string, timeout time.Duration) error {
	return n.changeErr(n.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(addr), 0, timeout).Error())
}

// RemoveServer takes a node out of the configuration.
func (n *Node) RemoveServer(id string, timeout time.Duration) error {
	return n.changeErr(n.raft.RemoveServer(raft.ServerID(id), 0, timeout).Error())
}

// TransferLeadership hands leadership to another voter.
func (n *Node) TransferLeadership() error { return n.changeErr(n.raft.LeadershipTransfer().Error()) }

// TransferLeadershipTo hands leadership to the voter id at addr.
func (n *Node) TransferLeadershipTo(id, addr string) error {
	return n.changeErr(n.raft.LeadershipTransferToServer(raft.ServerID(id), raft.ServerAddress(addr)).Error())
}

// Stats are raft's own figures (last_snapshot_index, commit_index, ...),
// for diagnostics.
func (n *Node) Stats() map[string]string { return n.raft.Stats() }

// changeErr marks the errors of a node that was not leading, which
// changed nothing, with ErrNotLeader.
func (n *Node) changeErr(err error) error {
	if err != nil && (errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost)) {
		return fmt.Errorf("%w: %v", ErrNotLeader, err)
	}
	return err
}

// ProbeRaft checks that addr accepts raft connections: a TCP dial, or a
// full TLS handshake when the raft port runs TLS, where the node must
// also hold a node certificate of this cluster's CA that names id (the
// node being joined).
func (n *Node) ProbeRaft(ctx context.Context, id, addr string, timeout time.Duration) error {
	if n.cfg.DialRaft == nil && n.cfg.Transport != nil {
		return nil // an in-process transport: nothing to dial
	}
	return probeRaft(ctx, n.cfg, id, addr, timeout)
}

// probeRaft runs cfg.DialRaft when set, else dials addr: over TLS when
// cfg.TLS is set, where the node must hold a node certificate of the CA
// that names id.
func probeRaft(ctx context.Context, cfg Config, id, addr string, timeout time.Duration) error {
	if cfg.DialRaft != nil {
		return cfg.DialRaft(ctx, addr)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var d interface {
		DialContext(ctx context.Context, network, addr string) (net.Conn, error)
	} = &net.Dialer{}
	if cfg.TLS != nil {
		d = &tls.Dialer{Config: cfg.TLS.PeerClient(addr, func(name string) bool { return name == id })}
	}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	return c.Close()
}
