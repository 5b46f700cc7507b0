package hashicorp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/node"
	"github.com/fencelock/fencelock/internal/node/raftport"
	"github.com/fencelock/fencelock/internal/raftlog"
	"github.com/fencelock/fencelock/internal/replica"
)

// Node is one node on hashicorp/raft over its stores: the replicated log
// the service proposes to (replica.Replicator), and everything it must
// close.
type Node struct {
	cfg  node.Config
	raft *raft.Raft
	fsm  *fsm.FSM
	addr raft.ServerAddress // this node's raft address
	*node.Storage
	closers []io.Closer // closed before the storage, last first
	m       *node.Machine
	peers   *node.PeerWatch // what the peers answered this node's AppendEntries
	// lastLeader is the last leader raft named: raft forgets a leader it
	// stops hearing from, the health view does not.
	lastLeader atomic.Value // string
	// otherLeader is the last leader raft named that is not this node.
	otherLeader atomic.Value              // string
	port        *raftport.Port            // nil on an in-memory or given transport
	given       bool                      // Open was given its transport
	running     atomic.Pointer[raft.Raft] // set once raft has started: the raft port's members
	// terms refuses the terms raft must not take from a peer (guard.go).
	terms *raftport.TermGuard
	// startIndex is the last index of the log when the node opened it.
	startIndex uint64
	stop       chan struct{}
	wg         sync.WaitGroup
}

var _ replica.Replicator = (*Node)(nil)

// Transport is a hashicorp/raft transport, for Open's trans (tests give
// an in-memory one to partition a cluster in one process).
type Transport = raft.Transport

// InmemTransport is hashicorp/raft's in-memory transport (tests).
type InmemTransport = raft.InmemTransport

// NewInmemTransport is an in-memory transport at addr (tests): connect
// members with Connect, cut them apart with Disconnect.
func NewInmemTransport(addr string) *InmemTransport {
	_, t := raft.NewInmemTransport(raft.ServerAddress(addr))
	return t
}

// Open opens the stores, bootstraps a configuration when there is no
// state yet (this node alone, or the configured peers; nothing when it is
// to be joined), and starts raft over f. trans, when not nil, replaces the
// raft port cfg asks for (tests). A running cluster adds and removes
// voters on the leader (AddVoter, RemoveServer).
func Open(cfg node.Config, f *fsm.FSM, trans Transport) (*Node, error) {
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
		return nil, fmt.Errorf("hashicorp: raft config: %w", err)
	}

	n := &Node{cfg: cfg, fsm: f, stop: make(chan struct{})}
	st, err := node.OpenStorage(cfg, node.EngineHashicorp)
	if err != nil {
		return nil, err
	}
	n.Storage = st
	logs, stable, snaps := st.Logs, st.Stable, st.Snaps
	n.m = st.Machine(f, cfg.Hooks)

	if err := st.Boot(cfg.TokenFloor, func() (bool, error) { return raft.HasExistingState(logs, stable, snaps) }); err != nil {
		n.close()
		return nil, err
	}
	n.given = trans != nil
	if trans == nil {
		if trans, err = n.transport(rc); err != nil {
			n.close()
			return nil, err
		}
	}
	n.peers = node.NewPeerWatch(time.Now)
	n.terms = raftport.NewTermGuard(cfg.Logger.With("component", "raft"), nil)
	guarded := guardTransport(trans, n.terms, n.currentTerm)
	n.closers = append(n.closers, guarded.(io.Closer))
	trans = watchTransport(guarded, n.peers)
	if err := bootstrap(cfg, rc, logs, stable, snaps, trans); err != nil {
		n.close()
		return nil, err
	}
	last := lastCommand(logs)
	if last.index > 0 {
		n.m.Replaying(last.index)
	}
	// raft reads back every entry it replicates (recentLogs).
	r, err := raft.NewRaft(rc, raftFSM{m: n.m, old: last, ents: new([]fsm.Entry)}, newRecentLogs(logs, recentLogsSize), stable, snaps, trans)
	if err != nil {
		n.m.EndReplay()
		n.close()
		return nil, fmt.Errorf("hashicorp: starting raft: %w", err)
	}
	n.raft, n.addr = r, trans.LocalAddr()
	n.standAlone()
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
	n.wg.Add(2)
	go func() { defer n.wg.Done(); n.m.ReturnFreedMemory(n.stop) }()
	go n.watchLeaderLoss()
	return n, nil
}

// lastCommand is the position of the last command in logs, which a
// restart replays up to: what follows it (a new leader's no-op, a
// configuration) never reaches the state machine. Zero: none among the
// last entries, or the log could not be read (raft will say so).
func lastCommand(logs raft.LogStore) raftPos {
	first, err1 := logs.FirstIndex()
	last, err2 := logs.LastIndex()
	if err1 != nil || err2 != nil || last == 0 {
		return raftPos{}
	}
	for i := last; i >= first && i+64 > last; i-- {
		var l raft.Log
		if err := logs.GetLog(i, &l); err != nil {
			return raftPos{}
		}
		if l.Type == raft.LogCommand && len(l.Data) > 0 {
			return raftPos{i, l.Term}
		}
	}
	return raftPos{}
}

// currentTerm is raft's current term; 0 before raft runs.
func (n *Node) currentTerm() uint64 {
	if r := n.running.Load(); r != nil {
		return r.CurrentTerm()
	}
	return 0
}

// transport is the raft transport cfg asks for: an in-memory one without
// a raft address, else raft's network transport over the raft port (TLS
// when configured, else TCP on a loopback address unless Insecure).
func (n *Node) transport(rc *raft.Config) (raft.Transport, error) {
	cfg := n.cfg
	if cfg.RaftAddr == "" {
		_, mem := raft.NewInmemTransport(raft.ServerAddress(cfg.NodeID))
		return mem, nil
	}
	port, err := raftport.Listen(cfg.RaftPortConfig(), n.isMember, hcFrames)
	if err != nil {
		return nil, fmt.Errorf("hashicorp: raft transport: %w", err)
	}
	n.port = port
	t := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  streamLayer{port},
		MaxPool: 3,
		Timeout: 10 * time.Second,
		Logger:  rc.Logger,
	})
	n.closers = append(n.closers, t)
	return t, nil
}

// streamLayer is the raft port as raft's network transport takes it.
type streamLayer struct{ *raftport.Port }

func (s streamLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return s.Port.Dial(string(addr), timeout)
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
func (n *Node) RaftPortStats() raftport.Stats {
	if n.port == nil {
		return raftport.Stats{}
	}
	st := n.port.Stats()
	st.MessagesRefused = n.terms.Count()
	return st
}

// bootstrap writes the first configuration when the stores hold no raft
// state and this node is not to be joined.
func bootstrap(cfg node.Config, rc *raft.Config, logs raft.LogStore, stable raft.StableStore, snaps raft.SnapshotStore, trans raft.Transport) error {
	has, err := raft.HasExistingState(logs, stable, snaps)
	if err != nil {
		return fmt.Errorf("hashicorp: reading raft state: %w", err)
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
				return fmt.Errorf("hashicorp: the peer list gives this node (%s) the raft address %s, not %s",
					p.ID, p.RaftAddr, trans.LocalAddr())
			}
			self = self || p.ID == cfg.NodeID
			boot.Servers = append(boot.Servers, raft.Server{
				Suffrage: raft.Voter, ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.RaftAddr)})
		}
		if !self {
			return fmt.Errorf("hashicorp: the peer list does not name this node (%s)", cfg.NodeID)
		}
	}
	if err := raft.BootstrapCluster(rc, logs, stable, snaps, trans, boot); err != nil {
		return fmt.Errorf("hashicorp: bootstrap: %w", err)
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
	n.closers = nil
	if n.Storage != nil {
		errs = append(errs, n.Storage.Close())
	}
	return errors.Join(errs...)
}

// Propose appends data, an encoded fsm.Command, to the log and waits
// until it is committed and applied here; it answers the state machine's
// result. The error is about the proposal (replica.ErrNotLeader,
// replica.ErrUnavailable, a *replica.StorageError); the command's own refusal is in the result.
func (n *Node) Propose(data []byte, timeout time.Duration) (*fsm.Result, error) {
	f := n.raft.Apply(data, timeout)
	if err := f.Error(); err != nil {
		if notLeading(err) {
			return nil, fmt.Errorf("%w: %v", replica.ErrNotLeader, err)
		}
		return nil, fmt.Errorf("%w: %w", replica.ErrUnavailable, err)
	}
	if err := n.m.FloorErr(); err != nil {
		// The entry is committed but this node could not record the
		// token floor that covers it: do not answer it as a grant.
		return nil, fmt.Errorf("%w: %v", replica.ErrUnavailable, err)
	}
	res, ok := f.Response().(*fsm.Result)
	if !ok {
		return nil, fmt.Errorf("%w: unexpected apply response %T", replica.ErrUnavailable, f.Response())
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
		return fmt.Errorf("%w: %v", replica.ErrNotLeader, err)
	}
	return nil
}

// Status reads this node's state.
func (n *Node) Status() replica.Status {
	_, id := n.raft.LeaderWithID()
	st := replica.Status{State: replica.State(n.raft.State()), LeaderID: string(id), Term: n.raft.CurrentTerm()}
	st.LeaderSilent = st.State != replica.Leader && time.Since(n.raft.LastContact()) > n.cfg.HeartbeatTimeout
	if last, _ := n.lastLeader.Load().(string); st.LeaderID == "" && last != n.cfg.NodeID {
		st.FormerLeader = last
	}
	st.Fault = n.Fault()
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
func (n *Node) Dialable() bool { return n.given || n.cfg.RaftAddr != "" }

// Snapshot takes a snapshot now (tests, operators).
func (n *Node) Snapshot() error { return n.raft.Snapshot().Error() }

// Configuration is the raft configuration as this node knows it.
func (n *Node) Configuration() ([]replica.Server, error) {
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, n.changeErr(err)
	}
	var out []replica.Server
	for _, s := range f.Configuration().Servers {
		out = append(out, replica.Server{ID: string(s.ID), Addr: string(s.Address), Suffrage: s.Suffrage.String(),
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
// changed nothing, with replica.ErrNotLeader.
func (n *Node) changeErr(err error) error {
	if err != nil && (errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost)) {
		return fmt.Errorf("%w: %v", replica.ErrNotLeader, err)
	}
	return err
}

// ProbeRaft checks that addr accepts raft connections: a TCP dial, or a
// full TLS handshake when the raft port runs TLS, where the node must
// also hold a node certificate of this cluster's CA that names id (the
// node being joined).
func (n *Node) ProbeRaft(ctx context.Context, id, addr string, timeout time.Duration) error {
	if n.cfg.DialRaft == nil && n.given {
		return nil // an in-process transport: nothing to dial
	}
	return raftport.Probe(ctx, n.cfg.RaftPortConfig(), id, addr, timeout)
}
