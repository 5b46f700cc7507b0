package hashicorp

import (
	"errors"
	"io"
	"syscall"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fencelock/fencelock/internal/node"
	"github.com/fencelock/fencelock/internal/replica"
)

// hashicorp/raft keeps, per follower, when it last answered and how far
// its log goes, but exports neither: the node wraps its transport so that
// a node.PeerWatch sees every AppendEntries and its answer.

// watchTransport wraps t so that w sees every AppendEntries answer. The
// optional interfaces raft looks for (WithClose, WithPreVote) are kept
// when t has them.
func watchTransport(t raft.Transport, w *node.PeerWatch) raft.Transport {
	wt := &watchedTransport{Transport: t, w: w}
	if _, ok := t.(raft.WithPreVote); ok {
		return &watchedPreVoteTransport{wt}
	}
	return wt
}

type watchedTransport struct {
	raft.Transport
	w *node.PeerWatch
}

func (t *watchedTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	t.w.Sent(string(id), args.Term)
	err := t.Transport.AppendEntries(id, target, args, resp)
	if err == nil {
		t.w.Answered(string(id), args.Term, resp.LastLog)
	}
	return err
}

// Close closes the transport raft was given, when it can be closed.
func (t *watchedTransport) Close() error {
	if c, ok := t.Transport.(raft.WithClose); ok {
		return c.Close()
	}
	return nil
}

// RequestVote notes the voter's answer, granted or not: a candidate
// hears from the others only that way. A request that went out on a
// pooled connection the voter had closed is sent once more (retryVote).
func (t *watchedTransport) RequestVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestVoteRequest, resp *raft.RequestVoteResponse) error {
	err := retryVote(func() error { return t.Transport.RequestVote(id, target, args, resp) })
	if err == nil {
		t.w.Voted(string(id))
	}
	return err
}

type watchedPreVoteTransport struct{ *watchedTransport }

func (t *watchedPreVoteTransport) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	err := retryVote(func() error { return t.Transport.(raft.WithPreVote).RequestPreVote(id, target, args, resp) })
	if err == nil {
		t.w.Voted(string(id))
	}
	return err
}

var _ io.Closer = (*watchedTransport)(nil)

// retryVote sends a (pre-)vote request, and once more if the connection
// it went out on had been closed by the other end. raft's network
// transport reuses a pooled connection without looking at it, and
// survivors talk to each other only in an election: the first request to
// a peer restarted since their last one went into a dead socket, and the
// candidate waited a whole election timeout for a vote that was never
// asked for (seen as a third election round after a leader's kill,
// cmd/fencelock's TestFailoverProcessWorstPhase). The failed connection
// is not pooled again, so the second try dials. Asking twice is safe: a
// pre-vote changes nothing, and a voter asked again in the same term by
// the candidate it voted for answers the same.
func retryVote(send func() error) error {
	err := send()
	if closedByPeer(err) {
		err = send()
	}
	return err
}

// closedByPeer reports whether err is a connection the other end had
// closed or reset.
func closedByPeer(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// Peers is every other member's health as this node sees it while it
// leads, in the configuration's order; ok is false when it does not lead
// (only the leader hears from every peer).
func (n *Node) Peers() (peers []replica.PeerStatus, ok bool) {
	if n.raft.State() != raft.Leader {
		return nil, false
	}
	servers, err := n.Configuration()
	if err != nil {
		return nil, false
	}
	ids := node.OtherIDs(servers, n.cfg.NodeID)
	n.peers.Forget(ids)
	// raft's LastContact is when a leader last sent to this node; it
	// stops moving once this node leads, so it dates the former leader.
	former := node.FormerLeader{ID: n.otherLeader.Load().(string), Heard: n.raft.LastContact()}
	return n.peers.Status(ids, n.raft.CurrentTerm(), n.raft.LastIndex(), n.UnreachableAfter(), former), true
}

// Contacts is every other member as this node itself last heard from
// it, whatever its role now, in the configuration's order: the answers
// to its appends and votes, and the appends of the leader it follows or
// last followed (raft's LastContact dates them).
func (n *Node) Contacts() []replica.PeerStatus {
	servers, err := n.Configuration()
	if err != nil {
		return nil
	}
	leader := node.FormerLeader{ID: n.otherLeader.Load().(string), Heard: n.raft.LastContact()}
	return n.peers.Contacts(node.OtherIDs(servers, n.cfg.NodeID), n.UnreachableAfter(), leader)
}

// UnreachableAfter is how long a leader waits for a peer's answer before
// it calls the peer unreachable: twice the heartbeat timeout, so that a
// heartbeat backed off after a failure (up to half the timeout) or one
// slow answer does not flap a live peer.
func (n *Node) UnreachableAfter() time.Duration { return 2 * n.cfg.HeartbeatTimeout }
