// Package replicatest is an in-memory replica.Replicator for tests of the
// service: one voter that applies each proposal to the state machine at
// once, in order, with no raft, no disk and no network. Tests take its
// leadership away and give it back (Lose, Lead) to drive what a leader
// change does to the service.
package replicatest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/replica"
)

// Log is a single-voter replicated log in memory. It starts as the
// leader: the first value on Leadership is true.
type Log struct {
	id   string
	fsm  *fsm.FSM
	lead chan bool

	mu      sync.Mutex
	index   uint64
	leading bool
	// FailCovered, when set, is what Covered answers (a token ceiling
	// this node could not record).
	failCovered error
	pending     uint64
	peers       []replica.PeerStatus
	contacts    []replica.PeerStatus // what Contacts answers; nil: every peer unknown
	term        uint64               // what Status says the term is
	follows     replica.Status       // what Status answers while it does not lead
}

var _ replica.Replicator = (*Log)(nil)

// New returns a log applying to f, whose one voter is id.
func New(id string, f *fsm.FSM) *Log {
	l := &Log{id: id, fsm: f, lead: make(chan bool, 16), leading: true}
	l.lead <- true
	return l
}

// Propose applies data at the next index, if this log leads.
func (l *Log) Propose(data []byte, timeout time.Duration) (*fsm.Result, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.leading {
		return nil, fmt.Errorf("%w: replicatest: leadership taken away", replica.ErrNotLeader)
	}
	l.index++
	return l.fsm.Apply(l.index, 1, data), nil
}

// Barrier returns at once: every proposal is applied before Propose
// returns.
func (l *Log) Barrier(time.Duration) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.leading {
		return replica.ErrNotLeader
	}
	return nil
}

// Leadership reports the changes Lose and Lead make.
func (l *Log) Leadership() <-chan bool { return l.lead }

// Lose takes leadership away, as a deposed leader loses it.
func (l *Log) Lose() {
	l.mu.Lock()
	l.follows = replica.Status{State: replica.Follower}
	l.mu.Unlock()
	l.set(false)
}

// Follow takes leadership away and makes Status name leader as the one
// this follower knows of, silent or not (it has not heard from it for a
// heartbeat timeout).
func (l *Log) Follow(leader string, silent bool) {
	l.mu.Lock()
	l.follows = replica.Status{State: replica.Follower, LeaderID: leader, LeaderSilent: silent}
	l.mu.Unlock()
	l.set(false)
}

// Lead gives it back, as an election won again.
func (l *Log) Lead() { l.set(true) }

func (l *Log) set(leading bool) {
	l.mu.Lock()
	changed := l.leading != leading
	l.leading = leading
	if leading {
		l.follows = replica.Status{State: replica.Follower}
	}
	l.mu.Unlock()
	if changed {
		l.lead <- leading
	}
}

// VerifyLeader answers whether this log leads.
func (l *Log) VerifyLeader() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.leading {
		return replica.ErrNotLeader
	}
	return nil
}

// Status is leader, or follower of the leader Follow named (none after
// Lose).
func (l *Log) Status() replica.Status {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.leading {
		return replica.Status{State: replica.Leader, LeaderID: l.id, Term: l.term}
	}
	st := l.follows
	st.Term = l.term
	return st
}

// SetTerm makes Status say the term is term.
func (l *Log) SetTerm(term uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.term = term
}

// AppliedIndex is the last index applied.
func (l *Log) AppliedIndex() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.index
}

// CommitIndex is AppliedIndex: what is committed is applied at once.
func (l *Log) CommitIndex() uint64 { return l.AppliedIndex() }

// StartIndex is 0: the log starts empty.
func (l *Log) StartIndex() uint64 { return 0 }

// FailCovered makes Covered answer err (nil heals it), as a node whose
// state file refused a token reservation.
func (l *Log) FailCovered(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.failCovered = err
}

// Covered answers what FailCovered set; nil by default.
func (l *Log) Covered(uint64, time.Duration) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failCovered != nil {
		return fmt.Errorf("%w: %w", replica.ErrUnavailable, l.failCovered)
	}
	return nil
}

// SetPendingFloor leaves a token floor for the next leader to commit.
func (l *Log) SetPendingFloor(floor uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pending = floor
}

// PendingFloor is the floor SetPendingFloor left.
func (l *Log) PendingFloor() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pending
}

// ClearPendingFloor forgets floor.
func (l *Log) ClearPendingFloor(floor uint64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pending == floor {
		l.pending = 0
	}
	return nil
}

// Configuration is the one voter, and a voter for each peer SetPeers
// pretends is there.
func (l *Log) Configuration() ([]replica.Server, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := []replica.Server{{ID: l.id, Addr: l.id, Suffrage: "Voter", Voter: true}}
	for _, p := range l.peers {
		out = append(out, replica.Server{ID: p.ID, Addr: p.ID, Suffrage: "Voter", Voter: true})
	}
	return out, nil
}

var errNoMembers = errors.New("replicatest: a single in-memory voter takes no other members")

// AddNonvoter is refused: nobody can reach an in-memory log.
func (l *Log) AddNonvoter(string, string, time.Duration) error { return errNoMembers }

// AddVoter is refused.
func (l *Log) AddVoter(string, string, time.Duration) error { return errNoMembers }

// RemoveServer is refused.
func (l *Log) RemoveServer(string, time.Duration) error { return errNoMembers }

// TransferLeadership is refused: there is nobody to hand it to.
func (l *Log) TransferLeadership() error { return errNoMembers }

// Addr is the voter's id.
func (l *Log) Addr() string { return l.id }

// Dialable is false.
func (l *Log) Dialable() bool { return false }

// ProbeRaft is refused.
func (l *Log) ProbeRaft(context.Context, string, string, time.Duration) error { return errNoMembers }

// SetPeers makes Peers answer ps while the log leads, and Configuration
// list them as voters: members a test pretends are there, which nothing
// is replicated to.
func (l *Log) SetPeers(ps []replica.PeerStatus) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.peers = append([]replica.PeerStatus(nil), ps...)
}

// Peers is what SetPeers gave, while the log leads.
func (l *Log) Peers() ([]replica.PeerStatus, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.leading {
		return nil, false
	}
	return append([]replica.PeerStatus(nil), l.peers...), true
}

// SetContacts makes Contacts answer ps, whatever the log's role: when
// this node last heard from each peer itself.
func (l *Log) SetContacts(ps []replica.PeerStatus) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.contacts = append([]replica.PeerStatus(nil), ps...)
}

// Contacts is what SetContacts gave; until then, every peer SetPeers
// pretends is there, never heard from.
func (l *Log) Contacts() []replica.PeerStatus {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.contacts != nil {
		return append([]replica.PeerStatus(nil), l.contacts...)
	}
	out := make([]replica.PeerStatus, 0, len(l.peers))
	for _, p := range l.peers {
		out = append(out, replica.PeerStatus{ID: p.ID, State: replica.PeerUnknown})
	}
	return out
}

// UnreachableAfter is a second: nothing here times out.
func (l *Log) UnreachableAfter() time.Duration { return time.Second }
