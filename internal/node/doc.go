// Package node runs one raft node over its durable stores: the log
// (raft-wal, sealed with a checksum per entry and healed after a failed
// rotation), the snapshots, the state file with its token ceiling and log
// watermark, the checks that refuse a damaged data directory, its offline
// repair (Recover), the raft port (TCP, or mutual TLS), and the mechanics
// of membership. It knows the state machine (internal/fsm) only as what
// raft applies; the rules of the lock service live above it, in
// internal/service, which sees a Node through Replicator.
//
// A proposal travels:
//
//  1. Propose hands the encoded command to raft, which seals it
//     (checkedLog), writes and fsyncs it (healingWAL), replicates it to a
//     quorum and commits it.
//  2. On every node the machine applies committed entries in batches to
//     the FSM and then raises the token ceiling in the state file
//     (tokenFloor, fsynced) past every token the batch issued, before raft
//     answers any of its entries.
//  3. Propose answers the state machine's result, unless this node could
//     not record the ceiling: then nothing is answered as a grant.
package node

import (
	"context"
	"time"

	"github.com/fencelock/fencelock/internal/fsm"
)

// Replicator is what the service asks of the replicated log: *Node is
// the real one; internal/node/nodetest has one in memory for tests. Its
// errors match ErrNotLeader, ErrUnavailable or carry a *StorageError.
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
	UnreachableAfter() time.Duration
}

var _ Replicator = (*Node)(nil)
