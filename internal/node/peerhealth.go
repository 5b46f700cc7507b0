package node

import (
	"io"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// A leader's view of its peers. hashicorp/raft keeps, per follower, when
// it last answered and how far its log goes, but exports neither; the
// transport sees both: every AppendEntries a leader sends (a heartbeat
// goes every tenth of the heartbeat timeout to each follower, however
// busy the log) is answered with the follower's last log index. So the
// node wraps its transport and records, per peer, the last answer.

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
	// something): it answered this node's AppendEntries, in any term,
	// or, for the leader this node followed before it led, sent them.
	// LastContact is how long ago that last was. LagKnown: Lag is how
	// many entries its log was behind this node's last index when it
	// last answered.
	Contacted   bool
	LastContact time.Duration
	LagKnown    bool
	Lag         uint64
}

// formerLeader is the leader a new leader followed before, and when it
// last heard from it: a leader killed is the peer most likely dead, and
// the new one need not wait a whole bound of its own tries to say so.
type formerLeader struct {
	id    string
	heard time.Time
}

// peerRecord is what the transport saw of one peer.
type peerRecord struct {
	term      uint64    // the term of the latest AppendEntries sent to it
	trying    time.Time // when the first AppendEntries of that term was sent
	contacted bool      // it answered in that term
	answered  time.Time // its last answer, in any term; zero: never
	lastLog   uint64    // the last log index it reported
}

// peerState classifies a peer at now: healthy when it answered in the
// current term within bound, unreachable when its last answer (or, if it
// has not answered in this term, the first try) is older than bound,
// unknown otherwise (a leader of less than bound that has not heard from
// it yet, or a peer no AppendEntries of this term has gone to).
func peerState(r peerRecord, term uint64, now time.Time, bound time.Duration) PeerState {
	switch {
	case r.term != term:
		return PeerUnknown
	case r.contacted && now.Sub(r.answered) <= bound:
		return PeerHealthy
	case r.contacted || now.Sub(r.trying) > bound:
		return PeerUnreachable
	}
	return PeerUnknown
}

// peerWatch records the AppendEntries answers of the peers.
type peerWatch struct {
	mu    sync.Mutex
	peers map[raft.ServerID]*peerRecord
	now   func() time.Time
}

func newPeerWatch(now func() time.Time) *peerWatch {
	return &peerWatch{peers: map[raft.ServerID]*peerRecord{}, now: now}
}

// sent notes an AppendEntries of term about to go to id.
func (w *peerWatch) sent(id raft.ServerID, term uint64) {
	now := w.now()
	w.mu.Lock()
	defer w.mu.Unlock()
	r := w.peers[id]
	if r == nil {
		r = &peerRecord{}
		w.peers[id] = r
	}
	if term > r.term {
		r.term, r.trying, r.contacted = term, now, false
	}
}

// answered notes id's answer to an AppendEntries of term, which says
// its log ends at lastLog.
func (w *peerWatch) answered(id raft.ServerID, term, lastLog uint64) {
	w.note(id, term, lastLog, true)
}

// heard notes id's answer to a request of term that does not say where
// its log ends (the etcd engine's heartbeats).
func (w *peerWatch) heard(id raft.ServerID, term uint64) { w.note(id, term, 0, false) }

func (w *peerWatch) note(id raft.ServerID, term, lastLog uint64, logKnown bool) {
	now := w.now()
	w.mu.Lock()
	defer w.mu.Unlock()
	r := w.peers[id]
	if r == nil || term < r.term {
		return // an answer to an older term's request, overtaken
	}
	r.contacted, r.answered = true, now
	if logKnown {
		r.lastLog = lastLog
	}
}

// status is every peer in ids as a leader of term whose last log index is
// last sees it at now, in the order of ids. The former leader, until it
// answers in this term, is unreachable once bound has passed since this
// node last heard from it as its follower.
func (w *peerWatch) status(ids []string, term, last uint64, bound time.Duration, former formerLeader) []PeerStatus {
	now := w.now()
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]PeerStatus, 0, len(ids))
	for _, id := range ids {
		var r peerRecord
		if p, ok := w.peers[raft.ServerID(id)]; ok {
			r = *p
		}
		st := PeerStatus{ID: id, State: peerState(r, term, now, bound)}
		heard := r.answered
		if !r.answered.IsZero() {
			st.LagKnown = true
			if last > r.lastLog {
				st.Lag = last - r.lastLog
			}
		}
		if id == former.id && !former.heard.IsZero() && !(r.term == term && r.contacted) {
			if former.heard.After(heard) {
				heard = former.heard
			}
			if now.Sub(heard) > bound {
				st.State = PeerUnreachable
			}
		}
		if !heard.IsZero() {
			st.Contacted, st.LastContact = true, now.Sub(heard)
		}
		out = append(out, st)
	}
	return out
}

// forget drops the records of peers not in ids (removed members).
func (w *peerWatch) forget(ids []string) {
	keep := make(map[raft.ServerID]bool, len(ids))
	for _, id := range ids {
		keep[raft.ServerID(id)] = true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for id := range w.peers {
		if !keep[id] {
			delete(w.peers, id)
		}
	}
}

// watchTransport wraps t so that w sees every AppendEntries answer. The
// optional interfaces raft looks for (WithClose, WithPreVote) are kept
// when t has them.
func watchTransport(t raft.Transport, w *peerWatch) raft.Transport {
	wt := &watchedTransport{Transport: t, w: w}
	if _, ok := t.(raft.WithPreVote); ok {
		return &watchedPreVoteTransport{wt}
	}
	return wt
}

type watchedTransport struct {
	raft.Transport
	w *peerWatch
}

func (t *watchedTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	t.w.sent(id, args.Term)
	err := t.Transport.AppendEntries(id, target, args, resp)
	if err == nil {
		t.w.answered(id, args.Term, resp.LastLog)
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

type watchedPreVoteTransport struct{ *watchedTransport }

func (t *watchedPreVoteTransport) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	return t.Transport.(raft.WithPreVote).RequestPreVote(id, target, args, resp)
}

var _ io.Closer = (*watchedTransport)(nil)

// Peers is every other member's health as this node sees it while it
// leads, in the configuration's order; ok is false when it does not lead
// (only the leader hears from every peer).
func (n *Node) Peers() (peers []PeerStatus, ok bool) {
	if n.raft.State() != raft.Leader {
		return nil, false
	}
	servers, err := n.Configuration()
	if err != nil {
		return nil, false
	}
	ids := otherIDs(servers, n.cfg.NodeID)
	n.peers.forget(ids)
	// raft's LastContact is when a leader last sent to this node; it
	// stops moving once this node leads, so it dates the former leader.
	former := formerLeader{id: n.otherLeader.Load().(string), heard: n.raft.LastContact()}
	return n.peers.status(ids, n.raft.CurrentTerm(), n.raft.LastIndex(), n.UnreachableAfter(), former), true
}

// UnreachableAfter is how long a leader waits for a peer's answer before
// it calls the peer unreachable: twice the heartbeat timeout, so that a
// heartbeat backed off after a failure (up to half the timeout) or one
// slow answer does not flap a live peer.
func (n *Node) UnreachableAfter() time.Duration { return 2 * n.cfg.HeartbeatTimeout }

// otherIDs are the ids of servers other than self.
func otherIDs(servers []Server, self string) []string {
	ids := make([]string, 0, len(servers))
	for _, s := range servers {
		if s.ID != self {
			ids = append(ids, s.ID)
		}
	}
	return ids
}
