// Package replica is the seam between the lock service and the replicated
// log under it: the small interface the service proposes through and reads
// leadership, membership and status from, with its types and errors. Both
// raft engines (internal/node/hashicorp, internal/node/etcd) satisfy it,
// and so does the in-memory double in replica/replicatest, so the service,
// its tests and the simulation know no engine.
//
// A proposal's error matches ErrNotLeader (this node does not lead; nothing
// was proposed) or ErrUnavailable (the engine could not take it, or cannot
// vouch for what it applied), or carries a *StorageError (the log could not
// write for lack of disk space or file descriptors). The command's own
// refusal is in the fsm.Result, not the error.
package replica

import (
	"context"
	"errors"
	"syscall"
	"time"

	"github.com/fencelock/fencelock/internal/fsm"
)

// Errors a proposal or a membership change can end with besides the
// command's own refusal.
var (
	// ErrNotLeader: this node does not lead, so it cannot propose.
	ErrNotLeader = errors.New("replica: not the leader")
	// ErrUnavailable: the engine is shutting down or could not take the
	// proposal, or this node cannot vouch for what it applied.
	ErrUnavailable = errors.New("replica: unavailable")
)

// StorageError is a write the log could not make durable for lack of a
// resource: disk space (507 no_space on the wire) or file descriptors
// (503 too_many_open_files). Nothing was acknowledged; the write may be
// retried, and the node takes writes again by itself once the resource
// is back.
type StorageError struct{ Err error }

func (e *StorageError) Error() string { return "replica: the log cannot write: " + e.Err.Error() }
func (e *StorageError) Unwrap() error { return e.Err }

// NoSpace says whether the disk is full.
func (e *StorageError) NoSpace() bool {
	return errors.Is(e.Err, syscall.ENOSPC) || errors.Is(e.Err, syscall.EDQUOT)
}

// Replicator is what the service asks of the replicated log.
type Replicator interface {
	Log
	Membership
}

// Log is the log itself: proposals, leadership and what is applied.
type Log interface {
	// Propose appends data (fsm.Encode) and waits until it is committed
	// and applied here, answering the state machine's result.
	Propose(data []byte, timeout time.Duration) (*fsm.Result, error)
	// Barrier waits until every entry committed before it is applied.
	Barrier(timeout time.Duration) error
	// Leadership receives true on becoming leader, false on losing it.
	Leadership() <-chan bool
	// VerifyLeader confirms with a quorum that this node still leads.
	VerifyLeader() error
	Status() Status
	AppliedIndex() uint64
	CommitIndex() uint64
	// StartIndex is the last index of the log when it was opened: until
	// it has applied that far, a node's replicated tables may lag its
	// own log.
	StartIndex() uint64
	// Covered waits up to timeout until token is covered by the token
	// ceiling this node recorded; an error says it will not be.
	Covered(token uint64, timeout time.Duration) error
	// PendingFloor is a token floor a new leader must commit before it
	// grants (fencelock recover's); ClearPendingFloor forgets it once
	// committed.
	PendingFloor() uint64
	ClearPendingFloor(floor uint64) error
}

// Membership is the raft configuration and its changes. Changes refused
// because this node does not lead match ErrNotLeader and changed nothing;
// any other failure may have taken effect.
type Membership interface {
	Configuration() ([]Server, error)
	AddNonvoter(id, addr string, timeout time.Duration) error
	AddVoter(id, addr string, timeout time.Duration) error
	RemoveServer(id string, timeout time.Duration) error
	TransferLeadership() error
	// Addr is this node's raft address; Dialable says whether any other
	// node can reach it there.
	Addr() string
	Dialable() bool
	// ProbeRaft checks that addr accepts raft connections from this
	// node, and that the node there is id.
	ProbeRaft(ctx context.Context, id, addr string, timeout time.Duration) error
	// Peers is the other members' health as this node sees it while it
	// leads (ok false otherwise); a peer silent for UnreachableAfter is
	// PeerUnreachable.
	Peers() (peers []PeerStatus, ok bool)
	// Contacts is every other member as this node itself last heard
	// from it, whatever its role now, in the configuration's order: by
	// the answers to its appends while it led (in any term), by the
	// appends of the leader it follows or last followed, and by the
	// answers to its vote requests. A member heard from within
	// UnreachableAfter is PeerHealthy, one heard from longer ago
	// PeerUnreachable, one never heard from PeerUnknown (Contacted
	// false); Lag is not known. It is what a node that does not lead can
	// say of the others when no leader can be asked.
	Contacts() []PeerStatus
	UnreachableAfter() time.Duration
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

// Server is one member of the raft configuration.
type Server struct {
	ID       string
	Addr     string
	Suffrage string // "Voter", "Nonvoter" or "Staging", as hashicorp/raft names them
	Voter    bool
}

// PeerState is what a leader makes of a peer.
type PeerState uint8

const (
	// PeerUnknown: the leader has not heard from it since it began
	// leading, and has not been trying for long enough to call it
	// unreachable.
	PeerUnknown PeerState = iota
	// PeerHealthy: it answered the leader within the bound.
	PeerHealthy
	// PeerUnreachable: no answer for longer than the bound.
	PeerUnreachable
)

func (s PeerState) String() string {
	switch s {
	case PeerHealthy:
		return "healthy"
	case PeerUnreachable:
		return "unreachable"
	}
	return "unknown"
}

// PeerStatus is one peer as this node, leading, sees it.
type PeerStatus struct {
	ID    string
	State PeerState
	// Contacted: this node has heard from it (LastContact means
	// something): it answered this node's appends, in any term, or, for
	// the leader this node followed before it led, sent them.
	// LastContact is how long ago that last was. LagKnown: Lag is how
	// many entries its log was behind this node's last index when it
	// last answered.
	Contacted   bool
	LastContact time.Duration
	LagKnown    bool
	Lag         uint64
}
