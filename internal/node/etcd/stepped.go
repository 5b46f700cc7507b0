package etcd

import (
	"bytes"
	"errors"
	"fmt"
	"slices"

	"google.golang.org/protobuf/proto"

	etcdraft "go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/node"
	"github.com/fencelock/fencelock/internal/node/etcd/etcdcodec"
)

// A stepped node is the engine with no goroutine of its own: whoever
// drives it is raft's goroutine and the apply goroutine at once, and
// calls it step by step — a tick, a peer's message, what the transport
// learned — each call persisting and sending what raft made of it and
// applying what committed before it returns. The production node runs
// the same core on goroutines (core.run, applyLoop, snapLoop); a stepped
// one is for a driver that must decide every order itself, such as the
// deterministic simulation (internal/sim), where one event loop runs a
// whole cluster.
//
// What other goroutines ask of the node (the service's proposals,
// VerifyLeader, membership changes, Snapshot) waits until the driver
// calls Run; the wake-ups of those goroutines go through Post.

// SteppedConfig is how a stepped node talks to its driver.
type SteppedConfig struct {
	// Send is given the messages raft sends, in order, as it sends
	// them; the driver delivers them (Step) or reports them lost.
	Send func([]Message)
	// Post runs a wake-up of a goroutine waiting on the node; nil: at
	// once.
	Post func(func())
	// Seed is where proposal ids start (see core).
	Seed uint64
	// Applied, when set, is told after each batch the node applied: the
	// index of the snapshot it restored first (0: none), and the
	// entries.
	Applied func(restored uint64, ents []Entry)
}

// Stepped is a node driven step by step (see SteppedConfig): a Node,
// with the calls that drive it. Only the driver calls them, one at a
// time.
type Stepped struct {
	*Node
	asked []chan error // Snapshot calls taken, to be answered by Run
}

// OpenStepped opens a node as Open does, over cfg's data directory or
// stores in memory, but starts nothing: raft moves only when sc's driver
// calls it. cfg's raft port settings are not used; Peers name the
// members' addresses as the driver's network knows them.
func OpenStepped(cfg node.Config, f *fsm.FSM, sc SteppedConfig) (*Stepped, error) {
	n, err := openNode(cfg, f, nil, &sc)
	if err != nil {
		return nil, err
	}
	return &Stepped{Node: n}, nil
}

// MemberID is the etcd member id of the node named id.
func MemberID(id string) uint64 { return etcdcodec.ID(id) }

// Message is a raft message between two members, opaque to the driver
// but for what a network needs to know of it.
type Message struct{ m *raftpb.Message }

func (m Message) From() uint64 { return m.m.GetFrom() }
func (m Message) To() uint64   { return m.m.GetTo() }

// Snapshot says whether it carries a snapshot (the driver reports how
// its delivery went: ReportSnapshot).
func (m Message) Snapshot() bool { return m.m.GetType() == raftpb.MsgSnap }

// Kind is raft's name for the message's type (MsgApp, MsgVote...).
func (m Message) Kind() string { return m.m.GetType().String() }

// Term is the message's term.
func (m Message) Term() uint64 { return m.m.GetTerm() }

// Size is the length of its encoding on the raft port.
func (m Message) Size() int { return proto.Size(m.m) }

// Tick advances raft's clock by one tick (an election timeout is
// etcdElectionTick of them) and handles what follows.
func (s *Stepped) Tick() error {
	return s.guard(func() { s.core.tickRaft() })
}

// Step hands raft a peer's message (a copy of it: members share
// nothing) and handles what follows.
func (s *Stepped) Step(m Message) error {
	c := proto.Clone(m.m).(*raftpb.Message)
	return s.guard(func() { s.core.step(c) })
}

// ReportUnreachable tells raft that a message to peer to was lost.
func (s *Stepped) ReportUnreachable(to uint64) error {
	return s.guard(func() { s.core.rn.ReportUnreachable(to) })
}

// ReportSnapshot tells raft whether the snapshot it sent to to arrived.
func (s *Stepped) ReportSnapshot(to uint64, done bool) error {
	return s.guard(func() { s.core.report(etcdReport{to: to, snap: true, done: done}) })
}

// Pending says whether another goroutine asked something of the node
// since the last Run. (A Snapshot call it finds waiting is taken: its
// channel has no buffer.)
func (s *Stepped) Pending() bool {
	c := s.core
	select {
	case ans := <-c.snapAsk:
		s.asked = append(s.asked, ans)
	default:
	}
	return len(c.props)+len(c.reads)+len(c.confs)+len(c.transfers)+len(c.snapWanted)+len(s.asked) > 0
}

// Run takes what other goroutines asked of the node, in a fixed order —
// reads, membership changes, transfers, proposals (by their commands),
// then snapshots — and handles what follows, until nothing more waits. An error says the node
// halted (Fault says why too).
func (s *Stepped) Run() error {
	c := s.core
	for s.Pending() {
		err := s.guard(func() {
			for {
				select {
				case id := <-c.reads:
					c.readIndex(id)
					continue
				case q := <-c.confs:
					c.queued = append(c.queued, q)
					continue
				case id := <-c.transfers:
					c.transferLeader(id)
					continue
				default:
				}
				break
			}
			// The proposals waiting, in the order of their commands:
			// goroutines that propose at one moment reach the channel
			// in the order the scheduler ran them, which a driver that
			// replays must not depend on.
			var props []etcdProp
			for more := true; more; {
				select {
				case p := <-c.props:
					props = append(props, p)
				default:
					more = false
				}
			}
			slices.SortStableFunc(props, func(a, b etcdProp) int { return bytes.Compare(a.data, b.data) })
			for _, p := range props {
				c.proposeOne(p)
			}
		})
		if err != nil {
			return err
		}
		asked := s.asked
		s.asked = nil
		for _, ans := range asked {
			ans <- c.snapshotNow(true)
		}
		select {
		case <-c.snapWanted:
			if err := c.snapshotNow(true); err != nil && !isNothingNew(err) {
				c.log.Warn("etcd engine: taking a snapshot for a new member failed", "err", err)
			}
		default:
		}
		if c.fault.Load() != nil {
			return c.halted()
		}
	}
	return nil
}

// SnapshotNow takes a snapshot if the policy's threshold of entries was
// applied since the last one (force: if anything was), as the production
// node's snapLoop does every interval; the driver keeps the interval.
func (s *Stepped) SnapshotNow(force bool) error {
	err := s.core.snapshotNow(force)
	if isNothingNew(err) {
		return nil
	}
	return err
}

// snapshotNow is takeSnapshot for a stepped core: every part on the
// caller's goroutine.
func (c *core) snapshotNow(force bool) error {
	if c.fault.Load() != nil {
		return c.halted()
	}
	tk := c.takeAt(etcdTake{force: force})
	if tk.err != nil || tk.fs == nil {
		return tk.err
	}
	k, err := c.writeSnap(tk)
	if err != nil {
		return err
	}
	return c.compacted(k)
}

func isNothingNew(err error) bool { return err == errNothingNew }

// guard runs f, then settles what it led to, as raft's goroutine does
// after each input; a panic inside raft halts the node as it does there.
// A halted node does nothing more.
func (s *Stepped) guard(f func()) (err error) {
	c := s.core
	if c.fault.Load() != nil {
		return c.halted()
	}
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("raft failed: %v", p)
			c.halt(err)
		}
	}()
	f()
	if c.fault.Load() != nil {
		return c.halted()
	}
	return c.settle()
}

// Unwritten says whether writes raft handed over wait for Write (with
// node.Config.AsyncLogWrites; async.go), or answers to them for raft.
func (s *Stepped) Unwritten() bool { return s.core.async && s.core.writes.pending() }

// Write does what the production node's writer goroutine does each
// time it wakes: it writes every append queued, in one write and one
// sync, delivers the answers that waited for it (Send is given those
// to peers), and hands raft its own. A failed write halts the node.
func (s *Stepped) Write() error {
	c := s.core
	return s.guard(func() {
		if err := c.writeStepped(); err != nil {
			c.halt(fmt.Errorf("persisting raft state failed: %w", err))
		}
	})
}

// Halted says whether the node stopped for good (Fault: why).
func (s *Stepped) Halted() error {
	if s.core.fault.Load() == nil {
		return nil
	}
	return s.core.halted()
}

// Raft is what raft's status says of this node now: the leader it names
// (0: none), its term, whether it leads, and its commit index (see
// below for asynchronous writes).
func (s *Stepped) Raft() (lead, term uint64, leading bool, commit uint64) {
	st := s.core.rn.BasicStatus()
	commit = st.HardState.GetCommit()
	if s.core.async {
		// A leader writing asynchronously may count a quorum of its
		// followers before its own log holds the entries; the commit
		// index told is that of entries its log holds (LogTerm).
		commit = min(commit, s.LastIndex())
	}
	return st.Lead, st.HardState.GetTerm(), st.RaftState == etcdraft.StateLeader, commit
}

// RaftState is raft's name for the node's state (StateFollower,
// StatePreCandidate, StateCandidate, StateLeader).
func (s *Stepped) RaftState() string { return s.core.rn.BasicStatus().RaftState.String() }

// Entry is an entry of the log as a stepped node shows it to its driver:
// Data is the command (fsm.Encode's) of a normal entry with one, nil for
// a barrier or an entry raft appends itself; Conf marks a configuration
// change, of the member Member: added as a voter, added as a learner
// (Learner), or removed (Remove).
type Entry struct {
	Index, Term     uint64
	Conf            bool
	Member          uint64
	Learner, Remove bool
	Data            []byte
}

// entries are ents as the driver sees them.
func entries(ents []*raftpb.Entry) []Entry {
	out := make([]Entry, len(ents))
	for i, e := range ents {
		out[i] = Entry{Index: e.GetIndex(), Term: e.GetTerm(), Conf: e.GetType() != raftpb.EntryNormal}
		d := e.GetData()
		switch e.GetType() {
		case raftpb.EntryNormal:
			if len(d) > etcdIDLen {
				out[i].Data = d[etcdIDLen:]
			}
		case raftpb.EntryConfChangeV2:
			cc := new(raftpb.ConfChangeV2)
			if protoUnmarshal(d, cc) == nil && len(cc.GetChanges()) == 1 {
				ch := cc.GetChanges()[0]
				out[i].Member = ch.GetNodeId()
				out[i].Learner = ch.GetType() == raftpb.ConfChangeAddLearnerNode
				out[i].Remove = ch.GetType() == raftpb.ConfChangeRemoveNode
			}
		case raftpb.EntryConfChange:
			cc := new(raftpb.ConfChange)
			if protoUnmarshal(d, cc) == nil {
				out[i].Member = cc.GetNodeId()
				out[i].Learner = cc.GetType() == raftpb.ConfChangeAddLearnerNode
				out[i].Remove = cc.GetType() == raftpb.ConfChangeRemoveNode
			}
		}
	}
	return out
}

// LogTerm is the term of the entry at index i of the node's log, as raft
// holds it (written and synced); ok false when the log does not reach i.
// An index compacted away answers its snapshot's term or 0, with ok.
func (s *Stepped) LogTerm(i uint64) (term uint64, ok bool) {
	t, err := s.core.ms.Term(i)
	switch {
	case err == nil:
		return t, true
	case errors.Is(err, etcdraft.ErrCompacted):
		return 0, true
	}
	return 0, false
}

// LastIndex is the index of the last entry of the node's log.
func (s *Stepped) LastIndex() uint64 {
	i, _ := s.core.ms.LastIndex()
	return i
}

// Applied is the last index the node applied.
func (s *Stepped) Applied() uint64 { return s.core.applied.Load() }

// Committed is the entries raft holds in memory from lo up to the commit
// index (after a compaction, from the first entry kept), with the index
// the first one has (0: none).
func (s *Stepped) Committed(lo uint64) ([]Entry, error) {
	ms := s.core.ms
	first, err := ms.FirstIndex()
	if err != nil {
		return nil, err
	}
	hs, _, err := ms.InitialState()
	if err != nil {
		return nil, err
	}
	lo = max(lo, first)
	if lo > hs.GetCommit() {
		return nil, nil
	}
	ents, err := ms.Entries(lo, hs.GetCommit()+1, ^uint64(0))
	if err != nil {
		return nil, err
	}
	return entries(ents), nil
}
