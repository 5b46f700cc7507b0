package etcd

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	etcdraft "go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/node"
	"github.com/fencelock/fencelock/internal/node/etcd/etcdcodec"
	"github.com/fencelock/fencelock/internal/node/etcd/etcdport"
	"github.com/fencelock/fencelock/internal/node/raftport"
	"github.com/fencelock/fencelock/internal/replica"
)

// Node is a node on etcd-io/raft over the same verified stores, token
// ceiling and data-dir refusals as the hashicorp engine's (node.Storage):
// the second engine behind replica.Replicator. It runs a node alone, a cluster over
// its raft port (transport: TCP, or mutual TLS with the hashicorp
// node's identity rules), or members in one process over a network
// given by the caller (etcdNet, tests); membership changes one member at
// a time. It snapshots as the hashicorp node does (SnapshotThreshold,
// SnapshotInterval, TrailingLogs; snapshot.go), restores the newest snapshot at open,
// and a follower behind the leader's compaction installs the leader's.
type Node struct {
	cfg  node.Config
	core *core
	fsm  *fsm.FSM
	*node.Storage
	closers []io.Closer // closed before the storage, last first
	self    uint64
	// verifyTimeout bounds VerifyLeader: four election timeouts. A
	// leader cut off from its quorum steps down within two (CheckQuorum),
	// which fails the wait sooner; the bound is for a loop that is stuck.
	verifyTimeout time.Duration
	dialable      bool
	port          *raftport.Port      // nil without a raft port
	tr            *etcdport.Transport // the raft port's messages; nil without one
	closeOnce     sync.Once
	closeErr      error
	stop          chan struct{}
	wg            sync.WaitGroup
}

var _ replica.Replicator = (*Node)(nil)

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

// portCore is the core as the raft-port transport sees it.
type portCore struct{ c *core }

func (p portCore) SetOnConf(f func(*raftpb.ConfState)) { p.c.setOnConf(f) }
func (p portCore) Conf() *raftpb.ConfState             { return p.c.conf.Load() }
func (p portCore) Term() uint64                        { return p.c.term.Load() }
func (p portCore) Names() map[uint64]node.Peer         { return *p.c.names.Load() }
func (p portCore) Name(id uint64) (node.Peer, bool)    { return p.c.name(id) }
func (p portCore) LearnName(id uint64, peer node.Peer) { p.c.learnName(id, peer) }
func (p portCore) Deliver(m *raftpb.Message)           { p.c.deliver(m) }
func (p portCore) ReportUnreachable(to uint64)         { p.c.reportUnreachable(to) }
func (p portCore) ReportSnapshot(to uint64, done bool) { p.c.reportSnapshot(to, done) }

// etcdElectionTick is the election timeout in ticks (core's config);
// the heartbeat is one tick.
const etcdElectionTick = 10

// Open opens a node on the etcd engine over cfg.DataDir, or on
// stores in memory without one (tests), with a raft port when
// cfg.RaftAddr or cfg.Listener is set. A hashicorp Transport is refused.
func Open(cfg node.Config, f *fsm.FSM) (*Node, error) {
	return openNode(cfg, f, nil, nil)
}

func openNode(cfg node.Config, f *fsm.FSM, network etcdNet, stepped *SteppedConfig) (*Node, error) {
	if cfg.NodeID == "" {
		return nil, errors.New("etcd: the etcd engine needs a node ID")
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
	n := &Node{cfg: cfg, fsm: f, self: etcdcodec.ID(cfg.NodeID), stop: make(chan struct{}),
		verifyTimeout: 4 * etcdElectionTick * tick, dialable: network != nil || stepped != nil || cfg.RaftAddr != ""}
	names := map[uint64]node.Peer{n.self: {ID: cfg.NodeID, RaftAddr: cfg.RaftAddr}}
	voters := []uint64{n.self}
	switch {
	case cfg.Join:
		voters = nil
	case len(cfg.Peers) > 0:
		voters = voters[:0]
		self := false
		for _, p := range cfg.Peers {
			id := etcdcodec.ID(p.ID)
			if q, dup := names[id]; dup && q.ID != p.ID {
				return nil, fmt.Errorf("etcd: the node IDs %s and %s map to the same etcd member id", q.ID, p.ID)
			}
			if p.ID == cfg.NodeID && network == nil && stepped == nil && p.RaftAddr != cfg.RaftAddr {
				return nil, fmt.Errorf("etcd: the peer list gives this node (%s) the raft address %q, but it listens on %q",
					p.ID, p.RaftAddr, cfg.RaftAddr)
			}
			names[id] = p
			voters = append(voters, id)
			self = self || p.ID == cfg.NodeID
		}
		if !self {
			return nil, fmt.Errorf("etcd: the peer list does not name this node (%s)", cfg.NodeID)
		}
	}
	if err := n.open(cfg, voters, names, tick, network, stepped); err != nil {
		n.closeAll()
		return nil, err
	}
	if stepped != nil {
		return n, nil
	}
	if to := n.core.replayTo; to > 0 {
		// The replay has begun; what is left of it runs under the relaxed
		// GC policy (node.Machine.Replaying).
		n.core.m.Replaying(to)
	}
	n.wg.Add(1)
	go func() { defer n.wg.Done(); n.core.m.ReturnFreedMemory(n.stop) }()
	return n, nil
}

func (n *Node) open(cfg node.Config, voters []uint64, names map[uint64]node.Peer, tick time.Duration, network etcdNet, stepped *SteppedConfig) error {
	st, err := node.OpenStorage(cfg, node.EngineEtcd)
	if err != nil {
		return err
	}
	n.Storage = st
	logs, stable, snaps := st.Logs, st.Stable, st.Snaps
	if err := st.Boot(cfg.TokenFloor, func() (bool, error) { return etcdHasState(logs, stable, snaps) }); err != nil {
		return err
	}
	seed, err := etcdSeed(stepped)
	if err != nil {
		return err
	}
	m := st.Machine(n.fsm, cfg.Hooks)
	c, err := newCore(logs, stable, m, n.self, voters, names, tick, cfg.Logger.With("component", "raft"), etcdPolicy(cfg, snaps), cfg.AsyncLogWrites)
	if cb := (*etcdcodec.CommitBeyondLogError)(nil); errors.As(err, &cb) && cfg.DataDir != "" {
		return &node.DataDirError{Dir: cfg.DataDir, File: filepath.Join(cfg.DataDir, "wal"), Problem: cb.Error()}
	}
	// OpenStorage read every entry and the newest snapshot whole a
	// moment ago.
	if re := (*etcdcodec.ReadError)(nil); errors.As(err, &re) {
		if d := node.RereadDamage(cfg, re.Index, re.Err); d != nil {
			return d
		}
	}
	if se := (*etcdcodec.SnapReadError)(nil); errors.As(err, &se) {
		if d := node.SnapshotRereadDamage(cfg, se.ID, se.Err); d != nil {
			return d
		}
	}
	if err != nil {
		return fmt.Errorf("etcd: starting raft: %w", err)
	}
	n.core = c
	if stepped != nil {
		c.stepped, c.post = true, stepped.Post
		if f := stepped.Applied; f != nil {
			c.onApply = func(a etcdApply) {
				var restored uint64
				if a.snap != nil {
					restored = a.snap.index
				}
				f(restored, entries(a.ents))
			}
		}
		c.init(seed)
		c.setSend(func(ms []*raftpb.Message) {
			out := make([]Message, len(ms))
			for i, m := range ms {
				out[i] = Message{m}
			}
			stepped.Send(out)
		})
	} else {
		c.start(seed)
	}
	n.closers = append(n.closers, closerFunc(func() error { c.close(); return nil }))
	if stepped != nil {
		return nil
	}
	switch {
	case network != nil:
		c.setSend(network.attach(n.self, c.deliver, c))
	case cfg.RaftAddr != "":
		port, err := raftport.Listen(cfg.RaftPortConfig(), n.isMember, etcdcodec.Frames)
		if err != nil {
			return fmt.Errorf("etcd: raft transport: %w", err)
		}
		n.port = port
		t := etcdport.New(port, portCore{c}, node.Peer{ID: cfg.NodeID, RaftAddr: cfg.RaftAddr}, etcdElectionTick*tick, cfg.Logger.With("component", "raft-port"))
		n.tr = t
		n.closers = append(n.closers, t)
		c.setSend(t.Send)
	}
	return nil
}

// etcdSeed is where the core's proposal ids start: random, so that an
// entry an earlier run proposed answers nobody now; a stepped node's is
// its driver's.
func etcdSeed(stepped *SteppedConfig) (uint64, error) {
	if stepped != nil {
		return stepped.Seed >> 1, nil
	}
	var seed [8]byte
	if _, err := rand.Read(seed[:]); err != nil {
		return 0, fmt.Errorf("etcd: seeding proposal ids: %w", err)
	}
	return binary.BigEndian.Uint64(seed[:]) >> 1, nil
}

// isMember says whether the raft port takes the node named id: a member
// of the configuration (voter or learner) by that node ID. A node with
// no configuration yet (started to be joined) takes any node of the CA,
// as the hashicorp node does: it cannot know its cluster before the
// leader reaches it.
func (n *Node) isMember(id string) bool {
	c := n.core
	eid := etcdcodec.ID(id)
	member, empty := etcdcodec.InConf(c.conf.Load(), eid)
	if empty {
		return true
	}
	p, ok := c.name(eid)
	return member && ok && p.ID == id
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
	b, err := etcdcodec.GetHardState(stable)
	return len(b) > 0, err
}

// Close stops raft, then the stores it used; it may be called again.
func (n *Node) Close() error {
	n.closeOnce.Do(func() {
		close(n.stop)
		n.wg.Wait()
		n.closeErr = n.closeAll()
	})
	return n.closeErr
}

func (n *Node) closeAll() error {
	var errs []error
	for i := len(n.closers) - 1; i >= 0; i-- {
		if err := n.closers[i].Close(); err != nil {
			errs = append(errs, err)
		}
	}
	n.closers = nil
	if n.Storage != nil {
		// Kept, closed: a call the service makes after Close (Status,
		// PendingFloor) answers from what it last knew instead of
		// dereferencing nil.
		errs = append(errs, n.Storage.Close())
	}
	return errors.Join(errs...)
}

// Propose appends data, an encoded fsm.Command, and waits until it is
// committed and applied here, answering the state machine's result. The
// timeout bounds the wait for raft to take it, as Node's does.
func (n *Node) Propose(data []byte, timeout time.Duration) (*fsm.Result, error) {
	if len(data) == 0 {
		return nil, errors.New("etcd: an empty proposal")
	}
	res, err := n.core.propose(data, timeout)
	if err != nil {
		return nil, err
	}
	if err := n.core.m.FloorErr(); err != nil {
		return nil, fmt.Errorf("%w: %v", replica.ErrUnavailable, err)
	}
	return res, nil
}

// Barrier waits until every entry committed before it has been applied:
// an entry without a command, proposed and waited for like any other.
func (n *Node) Barrier(timeout time.Duration) error {
	_, err := n.core.propose(nil, timeout)
	return err
}

// Leadership receives true when this node becomes leader and false when
// it stops being one; only the latest change waits in it.
func (n *Node) Leadership() <-chan bool { return n.core.leaderCh }

// VerifyLeader confirms with a quorum (raft's ReadIndex) that this node
// still leads.
func (n *Node) VerifyLeader() error { return n.core.verify(n.verifyTimeout) }

// Snapshot takes a snapshot now (tests, operators) and compacts the log
// behind it, keeping TrailingLogs entries; an error when nothing was
// applied since the last one.
func (n *Node) Snapshot() error { return n.core.snapshot() }

// Status reads this node's state.
func (n *Node) Status() replica.Status {
	c := n.core
	var st replica.Status
	switch etcdraft.StateType(c.state.Load()) {
	case etcdraft.StateLeader:
		st.State = replica.Leader
	case etcdraft.StateCandidate, etcdraft.StatePreCandidate:
		st.State = replica.Candidate
	default:
		st.State = replica.Follower
	}
	st.Term = c.term.Load()
	lead, _ := c.name(c.leadID.Load())
	st.LeaderID = lead.ID
	heard := time.Unix(0, c.contact.Load())
	st.LeaderSilent = st.State != replica.Leader && time.Since(heard) > n.cfg.HeartbeatTimeout
	if last := c.lastLead.Load(); st.LeaderID == "" && last != n.self {
		former, _ := c.name(last)
		st.FormerLeader = former.ID
	}
	st.Fault = n.Fault()
	return st
}

// AppliedIndex is the last index this node has applied.
func (n *Node) AppliedIndex() uint64 { return max(n.core.applied.Load(), n.fsm.AppliedIndex()) }

// CommitIndex is the last index known committed.
func (n *Node) CommitIndex() uint64 { return n.core.commit.Load() }

// StartIndex is the last index of the log when the node opened it.
func (n *Node) StartIndex() uint64 { return n.core.first }

// Configuration is the members as this node has applied them.
func (n *Node) Configuration() ([]replica.Server, error) {
	c, err := etcdcodec.Configuration(n.core.conf.Load(), *n.core.names.Load())
	if err != nil {
		return nil, err
	}
	out := make([]replica.Server, 0, len(c.Servers))
	for _, s := range c.Servers {
		out = append(out, replica.Server{ID: string(s.ID), Addr: string(s.Address), Suffrage: s.Suffrage.String(),
			Voter: s.Suffrage == raft.Voter})
	}
	return out, nil
}

// AddNonvoter adds a member that counts for no quorum (an etcd
// learner); a voter stays a voter, as on Node.
func (n *Node) AddNonvoter(id, addr string, timeout time.Duration) error {
	for _, v := range n.core.conf.Load().GetVoters() {
		if v == etcdcodec.ID(id) {
			return nil
		}
	}
	return n.change(raftpb.ConfChangeAddLearnerNode, id, addr, timeout)
}

// AddVoter adds a voter or promotes a non-voter.
func (n *Node) AddVoter(id, addr string, timeout time.Duration) error {
	return n.change(raftpb.ConfChangeAddNode, id, addr, timeout)
}

// RemoveServer takes a member out of the configuration; a leader that
// removes itself steps down once the change is applied.
func (n *Node) RemoveServer(id string, timeout time.Duration) error {
	return n.change(raftpb.ConfChangeRemoveNode, id, "", timeout)
}

// change makes one membership change through raft and waits until this
// node has applied it. Changes are one at a time, each committed before
// the next is proposed.
func (n *Node) change(typ raftpb.ConfChangeType, id, addr string, timeout time.Duration) error {
	if id == "" {
		return errors.New("etcd: a member needs a node ID")
	}
	if p, ok := n.core.name(etcdcodec.ID(id)); ok && p.ID != id {
		return fmt.Errorf("etcd: the node IDs %s and %s map to the same etcd member id", p.ID, id)
	}
	if typ == raftpb.ConfChangeRemoveNode {
		if p, ok := n.core.name(etcdcodec.ID(id)); ok {
			addr = p.RaftAddr
		}
	}
	return n.core.changeConf(typ, node.Peer{ID: id, RaftAddr: addr}, timeout)
}

// TransferLeadership hands leadership to the voter whose log is
// furthest along, and returns once this node no longer leads.
func (n *Node) TransferLeadership() error { return n.core.transferLeadership(n.verifyTimeout) }

// Addr is this node's raft address as configured; without one, its node
// ID, as the hashicorp node's in-memory transport names itself (Dialable
// says nobody can reach it there).
func (n *Node) Addr() string {
	if n.cfg.RaftAddr == "" {
		return n.cfg.NodeID
	}
	return n.cfg.RaftAddr
}

// Dialable says whether other nodes can reach this one: over its raft
// port, or as a member of a network in the same process.
func (n *Node) Dialable() bool { return n.dialable }

// ProbeRaft checks that addr accepts raft connections, as Node's does;
// members of a network in one process have nothing to dial.
func (n *Node) ProbeRaft(ctx context.Context, id, addr string, timeout time.Duration) error {
	if n.cfg.DialRaft == nil && n.port == nil && n.dialable {
		return nil
	}
	return raftport.Probe(ctx, n.cfg.RaftPortConfig(), id, addr, timeout)
}

// Peers is every other member's health as this node sees it while it
// leads, in the configuration's order (ok false when it does not lead):
// from their answers to its appends and heartbeats.
func (n *Node) Peers() (peers []replica.PeerStatus, ok bool) {
	c := n.core
	if !c.lead.Load() {
		return nil, false
	}
	servers, err := n.Configuration()
	if err != nil {
		return nil, false
	}
	ids := node.OtherIDs(servers, n.cfg.NodeID)
	c.watch.Forget(ids)
	var former node.FormerLeader
	if p, ok := c.name(c.otherLead.Load()); ok {
		former = node.FormerLeader{ID: p.ID, Heard: time.Unix(0, c.contact.Load())}
	}
	last, err := c.ms.LastIndex()
	if err != nil {
		return nil, false
	}
	return c.watch.Status(ids, c.term.Load(), last, n.UnreachableAfter(), former), true
}

// Contacts is every other member as this node itself last heard from
// it, whatever its role now, in the configuration's order: the answers
// to its appends and votes, and the messages of the leader it follows or
// last followed.
func (n *Node) Contacts() []replica.PeerStatus {
	c := n.core
	servers, err := n.Configuration()
	if err != nil {
		return nil
	}
	var leader node.FormerLeader
	if p, ok := c.name(c.otherLead.Load()); ok {
		leader = node.FormerLeader{ID: p.ID, Heard: time.Unix(0, c.contact.Load())}
	}
	return c.watch.Contacts(node.OtherIDs(servers, n.cfg.NodeID), n.UnreachableAfter(), leader)
}

// UnreachableAfter is how long a leader waits for a peer's answer before
// it calls the peer unreachable, as for Node.
func (n *Node) UnreachableAfter() time.Duration { return 2 * n.cfg.HeartbeatTimeout }

// RaftPortStats is the raft port's accounting; zero without a raft port.
func (n *Node) RaftPortStats() raftport.Stats {
	if n.port == nil {
		return raftport.Stats{}
	}
	st := n.port.Stats()
	if n.tr != nil {
		st.MessagesRefused = n.tr.Refused()
	}
	return st
}

type closerFunc func() error

func (f closerFunc) Close() error { return f() }
