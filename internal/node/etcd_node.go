package node

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	etcdraft "go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/raftlog"
)

// ErrEtcdNotYet is what the etcd engine answers for what it does not do
// yet (issue 28): a hashicorp Transport given in Config. It changed
// nothing.
var ErrEtcdNotYet = errors.New("server: not supported by the etcd engine yet")

// EtcdNode is a node on etcd-io/raft (issue 28, in progress) over the same
// verified stores, token ceiling and data-dir refusals as Node: the
// second engine behind Replicator. It runs a node alone, a cluster over
// its raft port (etcdTransport: TCP, or mutual TLS with the hashicorp
// node's identity rules), or members in one process over a network
// given by the caller (etcdNet, tests); membership changes one member at
// a time. It snapshots as Node does (SnapshotThreshold, SnapshotInterval,
// TrailingLogs; etcd_snapshot.go), restores the newest snapshot at open,
// and a follower behind the leader's compaction installs the leader's.
type EtcdNode struct {
	cfg  Config
	core *etcdCore
	fsm  *fsm.FSM
	floors
	wal     *healingWAL
	closers []io.Closer
	self    uint64
	// verifyTimeout bounds VerifyLeader: four election timeouts. A
	// leader cut off from its quorum steps down within two (CheckQuorum),
	// which fails the wait sooner; the bound is for a loop that is stuck.
	verifyTimeout time.Duration
	dialable      bool
	gate          *portGate      // the raft port's budgets; nil without one
	tr            *etcdTransport // the raft port's messages; nil without one
	closeOnce     sync.Once
	closeErr      error
	stop          chan struct{}
	wg            sync.WaitGroup
}

var _ Replicator = (*EtcdNode)(nil)

// etcdNet carries the messages of members in one process (tests): send
// is given every message raft sends, and the returned deliver is how the
// network hands a member its messages. The network tells the sender's
// core, through the reporter, how each snapshot it sent went (raft sends
// that peer nothing else until it knows) and which peers it could not
// reach.
type etcdNet interface {
	attach(id uint64, deliver func(*raftpb.Message), r etcdReporter) (send func([]*raftpb.Message))
}

// etcdReporter is what a transport tells the core of the peers.
type etcdReporter interface {
	reportSnapshot(to uint64, done bool)
	reportUnreachable(to uint64)
}

// etcdElectionTick is the election timeout in ticks (etcdCore's config);
// the heartbeat is one tick.
const etcdElectionTick = 10

// OpenEtcd opens a node on the etcd engine over cfg.DataDir, or on
// stores in memory without one (tests), with a raft port when
// cfg.RaftAddr or cfg.Listener is set. A hashicorp Transport is refused.
func OpenEtcd(cfg Config, f *fsm.FSM) (*EtcdNode, error) {
	if cfg.Transport != nil {
		return nil, fmt.Errorf("%w: a hashicorp raft Transport", ErrEtcdNotYet)
	}
	return openEtcd(cfg, f, nil)
}

func openEtcd(cfg Config, f *fsm.FSM, network etcdNet) (*EtcdNode, error) {
	if cfg.NodeID == "" {
		return nil, errors.New("server: the etcd engine needs a node ID")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	tick := max(cfg.ElectionTimeout/etcdElectionTick, time.Millisecond)
	if cfg.ElectionTimeout <= 0 {
		tick = 100 * time.Millisecond
	}
	if cfg.RaftAddr == "" && cfg.Listener != nil {
		cfg.RaftAddr = cfg.Listener.Addr().String()
	}
	n := &EtcdNode{cfg: cfg, fsm: f, self: etcdID(cfg.NodeID), stop: make(chan struct{}),
		verifyTimeout: 4 * etcdElectionTick * tick, dialable: network != nil || cfg.RaftAddr != ""}
	names := map[uint64]Peer{n.self: {ID: cfg.NodeID, RaftAddr: cfg.RaftAddr}}
	voters := []uint64{n.self}
	switch {
	case cfg.Join:
		voters = nil
	case len(cfg.Peers) > 0:
		voters = voters[:0]
		self := false
		for _, p := range cfg.Peers {
			id := etcdID(p.ID)
			if q, dup := names[id]; dup && q.ID != p.ID {
				return nil, fmt.Errorf("server: the node IDs %s and %s map to the same etcd member id", q.ID, p.ID)
			}
			if p.ID == cfg.NodeID && network == nil && p.RaftAddr != cfg.RaftAddr {
				return nil, fmt.Errorf("server: the peer list gives this node (%s) the raft address %q, but it listens on %q",
					p.ID, p.RaftAddr, cfg.RaftAddr)
			}
			names[id] = p
			voters = append(voters, id)
			self = self || p.ID == cfg.NodeID
		}
		if !self {
			return nil, fmt.Errorf("server: the peer list does not name this node (%s)", cfg.NodeID)
		}
	}
	if err := n.open(cfg, voters, names, tick, network); err != nil {
		n.closeAll()
		return nil, err
	}
	n.wg.Add(1)
	go func() { defer n.wg.Done(); n.core.m.ReturnFreedMemory(n.stop) }()
	return n, nil
}

func (n *EtcdNode) open(cfg Config, voters []uint64, names map[uint64]Peer, tick time.Duration, network etcdNet) error {
	var (
		logs   raft.LogStore
		stable raft.StableStore
		snaps  raft.SnapshotStore
	)
	if cfg.DataDir == "" {
		mem := raft.NewInmemStore()
		logs, stable, snaps = mem, mem, raft.NewInmemSnapshotStore()
	} else {
		st, err := n.openDir(cfg)
		if err != nil {
			return err
		}
		logs, stable, snaps = st.logs, st.stable, st.snaps
	}
	if err := n.boot(cfg.TokenFloor, func() (bool, error) { return etcdHasState(logs, stable, snaps) }); err != nil {
		return err
	}
	var seed [8]byte
	if _, err := rand.Read(seed[:]); err != nil {
		return fmt.Errorf("server: seeding proposal ids: %w", err)
	}
	m := newMachine(n.fsm, n.floor, cfg.Hooks)
	c, err := openEtcdCore(logs, stable, m, n.self, voters, names, tick, cfg.Logger.With("component", "raft"),
		binary.BigEndian.Uint64(seed[:])>>1, etcdPolicy(cfg, snaps))
	if err != nil {
		return fmt.Errorf("server: starting raft: %w", err)
	}
	n.core = c
	n.closers = append(n.closers, closerFunc(func() error { c.close(); return nil }))
	switch {
	case network != nil:
		c.setSend(network.attach(n.self, c.deliver, c))
	case cfg.RaftAddr != "":
		ln, err := listenRaft(cfg)
		if err != nil {
			return fmt.Errorf("server: raft transport: %w", err)
		}
		n.gate = newPortGate(cfg.RaftPort, cfg.Logger.With("component", "raft-port"))
		st := newStream(ln, cfg.TLS, n.isMember, n.gate)
		t := newEtcdTransport(st, cfg.TLS, c, Peer{ID: cfg.NodeID, RaftAddr: cfg.RaftAddr}, etcdElectionTick*tick, cfg.Logger.With("component", "raft-port"))
		n.tr = t
		n.closers = append(n.closers, t)
		c.setSend(t.send)
	}
	return nil
}

// isMember says whether the raft port takes the node named id: a member
// of the configuration (voter or learner) by that node ID. A node with
// no configuration yet (started to be joined) takes any node of the CA,
// as the hashicorp node does: it cannot know its cluster before the
// leader reaches it.
func (n *EtcdNode) isMember(id string) bool {
	c := n.core
	eid := etcdID(id)
	member, empty := etcdInConf(c.conf.Load(), eid)
	if empty {
		return true
	}
	p, ok := c.name(eid)
	return member && ok && p.ID == id
}

// openDir locks cfg.DataDir, claims it for the etcd engine and opens its
// verified stores, with the token ceiling over its state file.
func (n *EtcdNode) openDir(cfg Config) (*stores, error) {
	st, err := n.openDataDir(cfg, EngineEtcd, raftlog.New(cfg.Logger.With("component", "raft")), &n.closers)
	if err != nil {
		return nil, err
	}
	n.wal = st.wal
	return st, nil
}

// etcdHasState says whether the stores hold etcd state: entries, a
// snapshot or a hard state.
func etcdHasState(logs raft.LogStore, stable raft.StableStore, snaps raft.SnapshotStore) (bool, error) {
	last, err := logs.LastIndex()
	if err != nil || last > 0 {
		return last > 0, err
	}
	if list, err := snaps.List(); err != nil || len(list) > 0 {
		return len(list) > 0, err
	}
	b, err := etcdGetHardState(stable)
	return len(b) > 0, err
}

// Close stops raft, then the stores it used; it may be called again.
func (n *EtcdNode) Close() error {
	n.closeOnce.Do(func() {
		close(n.stop)
		n.wg.Wait()
		n.closeErr = n.closeAll()
	})
	return n.closeErr
}

func (n *EtcdNode) closeAll() error {
	var errs []error
	for i := len(n.closers) - 1; i >= 0; i-- {
		if err := n.closers[i].Close(); err != nil {
			errs = append(errs, err)
		}
	}
	n.closers = nil
	return errors.Join(errs...)
}

// Propose appends data, an encoded fsm.Command, and waits until it is
// committed and applied here, answering the state machine's result. The
// timeout bounds the wait for raft to take it, as Node's does.
func (n *EtcdNode) Propose(data []byte, timeout time.Duration) (*fsm.Result, error) {
	if len(data) == 0 {
		return nil, errors.New("server: an empty proposal")
	}
	res, err := n.core.propose(data, timeout)
	if err != nil {
		return nil, err
	}
	if err := n.durableErr(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return res, nil
}

// Barrier waits until every entry committed before it has been applied:
// an entry without a command, proposed and waited for like any other.
func (n *EtcdNode) Barrier(timeout time.Duration) error {
	_, err := n.core.propose(nil, timeout)
	return err
}

// Leadership receives true when this node becomes leader and false when
// it stops being one; only the latest change waits in it.
func (n *EtcdNode) Leadership() <-chan bool { return n.core.leaderCh }

// VerifyLeader confirms with a quorum (raft's ReadIndex) that this node
// still leads.
func (n *EtcdNode) VerifyLeader() error { return n.core.verify(n.verifyTimeout) }

// Snapshot takes a snapshot now (tests, operators) and compacts the log
// behind it, keeping TrailingLogs entries; an error when nothing was
// applied since the last one.
func (n *EtcdNode) Snapshot() error { return n.core.snapshot() }

// Status reads this node's state.
func (n *EtcdNode) Status() Status {
	c := n.core
	var st Status
	switch etcdraft.StateType(c.state.Load()) {
	case etcdraft.StateLeader:
		st.State = Leader
	case etcdraft.StateCandidate, etcdraft.StatePreCandidate:
		st.State = Candidate
	default:
		st.State = Follower
	}
	st.Term = c.term.Load()
	lead, _ := c.name(c.leadID.Load())
	st.LeaderID = lead.ID
	heard := time.Unix(0, c.contact.Load())
	st.LeaderSilent = st.State != Leader && time.Since(heard) > n.cfg.HeartbeatTimeout
	if last := c.lastLead.Load(); st.LeaderID == "" && last != n.self {
		former, _ := c.name(last)
		st.FormerLeader = former.ID
	}
	if n.wal != nil {
		st.Fault = n.wal.Fault()
	}
	return st
}

// AppliedIndex is the last index this node has applied.
func (n *EtcdNode) AppliedIndex() uint64 { return max(n.core.applied.Load(), n.fsm.AppliedIndex()) }

// CommitIndex is the last index known committed.
func (n *EtcdNode) CommitIndex() uint64 { return n.core.commit.Load() }

// StartIndex is the last index of the log when the node opened it.
func (n *EtcdNode) StartIndex() uint64 { return n.core.first }

// Configuration is the members as this node has applied them.
func (n *EtcdNode) Configuration() ([]Server, error) {
	c, err := etcdConfiguration(n.core.conf.Load(), *n.core.names.Load())
	if err != nil {
		return nil, err
	}
	out := make([]Server, 0, len(c.Servers))
	for _, s := range c.Servers {
		out = append(out, Server{ID: string(s.ID), Addr: string(s.Address), Suffrage: s.Suffrage.String(),
			Voter: s.Suffrage == raft.Voter})
	}
	return out, nil
}

// AddNonvoter adds a member that counts for no quorum (an etcd
// learner); a voter stays a voter, as on Node.
func (n *EtcdNode) AddNonvoter(id, addr string, timeout time.Duration) error {
	for _, v := range n.core.conf.Load().GetVoters() {
		if v == etcdID(id) {
			return nil
		}
	}
	return n.change(raftpb.ConfChangeAddLearnerNode, id, addr, timeout)
}

// AddVoter adds a voter or promotes a non-voter.
func (n *EtcdNode) AddVoter(id, addr string, timeout time.Duration) error {
	return n.change(raftpb.ConfChangeAddNode, id, addr, timeout)
}

// RemoveServer takes a member out of the configuration; a leader that
// removes itself steps down once the change is applied.
func (n *EtcdNode) RemoveServer(id string, timeout time.Duration) error {
	return n.change(raftpb.ConfChangeRemoveNode, id, "", timeout)
}

// change makes one membership change through raft and waits until this
// node has applied it. Changes are one at a time, each committed before
// the next is proposed.
func (n *EtcdNode) change(typ raftpb.ConfChangeType, id, addr string, timeout time.Duration) error {
	if id == "" {
		return errors.New("server: a member needs a node ID")
	}
	if p, ok := n.core.name(etcdID(id)); ok && p.ID != id {
		return fmt.Errorf("server: the node IDs %s and %s map to the same etcd member id", p.ID, id)
	}
	if typ == raftpb.ConfChangeRemoveNode {
		if p, ok := n.core.name(etcdID(id)); ok {
			addr = p.RaftAddr
		}
	}
	return n.core.changeConf(typ, Peer{ID: id, RaftAddr: addr}, timeout)
}

// TransferLeadership hands leadership to the voter whose log is
// furthest along, and returns once this node no longer leads.
func (n *EtcdNode) TransferLeadership() error { return n.core.transferLeadership(n.verifyTimeout) }

// Addr is this node's raft address as configured; without one, its node
// ID, as the hashicorp node's in-memory transport names itself (Dialable
// says nobody can reach it there).
func (n *EtcdNode) Addr() string {
	if n.cfg.RaftAddr == "" {
		return n.cfg.NodeID
	}
	return n.cfg.RaftAddr
}

// Dialable says whether other nodes can reach this one: over its raft
// port, or as a member of a network in the same process.
func (n *EtcdNode) Dialable() bool { return n.dialable }

// ProbeRaft checks that addr accepts raft connections, as Node's does;
// members of a network in one process have nothing to dial.
func (n *EtcdNode) ProbeRaft(ctx context.Context, id, addr string, timeout time.Duration) error {
	if n.cfg.DialRaft == nil && n.gate == nil && n.dialable {
		return nil
	}
	return probeRaft(ctx, n.cfg, id, addr, timeout)
}

// Peers is every other member's health as this node sees it while it
// leads, in the configuration's order (ok false when it does not lead):
// from their answers to its appends and heartbeats.
func (n *EtcdNode) Peers() (peers []PeerStatus, ok bool) {
	c := n.core
	if !c.lead.Load() {
		return nil, false
	}
	servers, err := n.Configuration()
	if err != nil {
		return nil, false
	}
	ids := otherIDs(servers, n.cfg.NodeID)
	c.watch.forget(ids)
	var former formerLeader
	if p, ok := c.name(c.otherLead.Load()); ok {
		former = formerLeader{id: p.ID, heard: time.Unix(0, c.contact.Load())}
	}
	last, err := c.ms.LastIndex()
	if err != nil {
		return nil, false
	}
	return c.watch.status(ids, c.term.Load(), last, n.UnreachableAfter(), former), true
}

// UnreachableAfter is how long a leader waits for a peer's answer before
// it calls the peer unreachable, as for Node.
func (n *EtcdNode) UnreachableAfter() time.Duration { return 2 * n.cfg.HeartbeatTimeout }

// RaftPortStats is the raft port's accounting; zero without a raft port.
func (n *EtcdNode) RaftPortStats() RaftPortStats {
	if n.gate == nil {
		return RaftPortStats{}
	}
	return n.gate.stats()
}
