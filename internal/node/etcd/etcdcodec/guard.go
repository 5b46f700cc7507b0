package etcdcodec

import (
	"errors"
	"fmt"

	"go.etcd.io/raft/v3/confchange"
	"go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/node"
	"github.com/fencelock/fencelock/internal/node/raftport"
)

// What the transport refuses before raft sees it (issue 41): a message
// raft would take and then stop on. raft steps any term a member sends
// and adds one at each election, so a term of 2^64-1 wraps and raft
// panics at the next pre-vote ("term should be set when sending
// MsgPreVote"); and a MsgSnap raft takes is installed before anything
// else, so one whose data cannot be restored halts the node (install,
// restore). Each message from a peer goes through CheckMsg first,
// against this node's term and names; one it refuses is dropped, as a
// lost packet would be, and raft recovers the same way: a leader whose
// snapshot was dropped finds the follower still behind its log and
// sends its snapshot again. The check is at the raft port, the boundary
// between peers and the core: the core itself is unchanged.

// errBadSnap: a MsgSnap whose snapshot this node could not install.
var errBadSnap = errors.New("a snapshot this node could not install")

// CheckMsg says why m, from a peer, must not reach raft on a node
// whose term is current and who knows the members names: a term the
// guard refuses, a term inside m above m's own (no member sends one),
// or a snapshot this node could not install. Messages of term 0 (a
// proposal, a read index forwarded to the leader) carry no term raft
// takes.
func CheckMsg(g *raftport.TermGuard, m *raftpb.Message, current uint64, names map[uint64]node.Peer) error {
	term := m.GetTerm()
	if term == 0 {
		return nil
	}
	if err := g.Check(term, current); err != nil {
		return err
	}
	inner := func(what string, t uint64) error {
		if t > term {
			return fmt.Errorf("%w: the %s term %d inside a message of term %d", raftport.ErrTerm, what, t, term)
		}
		return nil
	}
	if err := inner("log", m.GetLogTerm()); err != nil {
		return err
	}
	for _, e := range m.GetEntries() {
		if err := inner("entry", e.GetTerm()); err != nil {
			return err
		}
	}
	if m.GetType() == raftpb.MsgSnap {
		if err := inner("snapshot", m.GetSnapshot().GetMetadata().GetTerm()); err != nil {
			return err
		}
		if err := etcdCheckSnap(m.GetSnapshot(), names); err != nil {
			return fmt.Errorf("%w: %w", errBadSnap, err)
		}
	}
	return nil
}

// etcdCheckSnap says why s could not be installed on a node that knows
// the members names, as install and restore would find it: at no
// index, in no term, a configuration raft or this engine cannot take, a
// member it does not name, or data that does not decode, down to the
// state machine's own.
func etcdCheckSnap(s *raftpb.Snapshot, names map[uint64]node.Peer) error {
	md := s.GetMetadata()
	if md.GetIndex() == 0 || md.GetTerm() == 0 {
		return fmt.Errorf("at index %d, term %d", md.GetIndex(), md.GetTerm())
	}
	cs := md.GetConfState()
	if _, _, err := confchange.Restore(confchange.Changer{
		Tracker: tracker.MakeProgressTracker(1, 0), LastIndex: md.GetIndex(),
	}, raftpb.EnsureConfState(cs)); err != nil {
		return fmt.Errorf("its configuration %v: %w", cs, err)
	}
	snapNames, fsmData, err := DecodeSnap(s.GetData())
	if err != nil {
		return err
	}
	known := make(map[uint64]node.Peer, len(names)+len(snapNames))
	for id, p := range names {
		known[id] = p
	}
	for id, p := range snapNames {
		known[id] = p
	}
	if _, err := Configuration(cs, known); err != nil {
		return fmt.Errorf("its configuration: %w", err)
	}
	if err := fsm.New(nil).UnmarshalBinary(fsmData); err != nil {
		return err
	}
	return nil
}
