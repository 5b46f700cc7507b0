package node

import (
	"sync"
	"time"

	"github.com/fencelock/fencelock/internal/replica"
)

// A leader's view of its peers, for both engines. Neither raft library
// exports, per follower, when it last answered and how far its log goes;
// the transport sees both: every append a leader sends (hashicorp sends a
// heartbeat every tenth of the heartbeat timeout to each follower,
// however busy the log; etcd one per tick) is answered with the
// follower's last log index. So each engine tells a PeerWatch what it
// sends and what comes back, and the watch records, per peer, the last
// answer.

// FormerLeader is the leader a new leader followed before (ID), and when
// it last heard from it (Heard): a leader killed is the peer most likely
// dead, and the new one need not wait a whole bound of its own tries to
// say so.
type FormerLeader struct {
	ID    string
	Heard time.Time
}

// peerRecord is what the transport saw of one peer.
type peerRecord struct {
	term      uint64    // the term of the latest AppendEntries sent to it
	trying    time.Time // when the first AppendEntries of that term was sent
	contacted bool      // it answered in that term
	answered  time.Time // its last answer, in any term; zero: never
	lastLog   uint64    // the last log index it reported
	voted     time.Time // its last answer to a vote request of this node; zero: never
}

// peerState classifies a peer at now: healthy when it answered in the
// current term within bound, unreachable when its last answer (or, if it
// has not answered in this term, the first try) is older than bound,
// unknown otherwise (a leader of less than bound that has not heard from
// it yet, or a peer no AppendEntries of this term has gone to).
func peerState(r peerRecord, term uint64, now time.Time, bound time.Duration) replica.PeerState {
	switch {
	case r.term != term:
		return replica.PeerUnknown
	case r.contacted && now.Sub(r.answered) <= bound:
		return replica.PeerHealthy
	case r.contacted || now.Sub(r.trying) > bound:
		return replica.PeerUnreachable
	}
	return replica.PeerUnknown
}

// PeerWatch records the peers' answers to a leader's appends.
type PeerWatch struct {
	mu    sync.Mutex
	peers map[string]*peerRecord
	now   func() time.Time
}

// NewPeerWatch is a watch that reads the time from now.
func NewPeerWatch(now func() time.Time) *PeerWatch {
	return &PeerWatch{peers: map[string]*peerRecord{}, now: now}
}

// Sent notes an append (or heartbeat) of term about to go to id.
func (w *PeerWatch) Sent(id string, term uint64) {
	now := w.now()
	w.mu.Lock()
	defer w.mu.Unlock()
	r := w.recordLocked(id)
	if term > r.term {
		r.term, r.trying, r.contacted = term, now, false
	}
}

// Answered notes id's answer to an append of term, which says its log
// ends at lastLog.
func (w *PeerWatch) Answered(id string, term, lastLog uint64) { w.note(id, term, lastLog, true) }

// Voted notes id's answer, granted or not, to a vote (or pre-vote)
// request of this node: a candidate hears from the voters that way only.
func (w *PeerWatch) Voted(id string) {
	now := w.now()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.recordLocked(id).voted = now
}

// recordLocked is id's record, new if it had none.
func (w *PeerWatch) recordLocked(id string) *peerRecord {
	r := w.peers[id]
	if r == nil {
		r = &peerRecord{}
		w.peers[id] = r
	}
	return r
}

// Heard notes id's answer to a request of term that does not say where
// its log ends (the etcd engine's heartbeats).
func (w *PeerWatch) Heard(id string, term uint64) { w.note(id, term, 0, false) }

func (w *PeerWatch) note(id string, term, lastLog uint64, logKnown bool) {
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

// Status is every peer in ids as a leader of term whose last log index is
// last sees it at now, in the order of ids. The former leader, until it
// answers in this term, is unreachable once bound has passed since this
// node last heard from it as its follower.
func (w *PeerWatch) Status(ids []string, term, last uint64, bound time.Duration, former FormerLeader) []replica.PeerStatus {
	now := w.now()
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]replica.PeerStatus, 0, len(ids))
	for _, id := range ids {
		var r peerRecord
		if p, ok := w.peers[string(id)]; ok {
			r = *p
		}
		st := replica.PeerStatus{ID: id, State: peerState(r, term, now, bound)}
		heard := r.answered
		if !r.answered.IsZero() {
			st.LagKnown = true
			if last > r.lastLog {
				st.Lag = last - r.lastLog
			}
		}
		if id == former.ID && !former.Heard.IsZero() && !(r.term == term && r.contacted) {
			if former.Heard.After(heard) {
				heard = former.Heard
			}
			if now.Sub(heard) > bound {
				st.State = replica.PeerUnreachable
			}
		}
		if !heard.IsZero() {
			st.Contacted, st.LastContact = true, now.Sub(heard)
		}
		out = append(out, st)
	}
	return out
}

// Contacts is every peer in ids as this node last heard from it itself,
// whatever its role now, at now and in the order of ids: the answers to
// its appends (in any term) and to its vote requests, and for leader.ID
// the leader's own appends (leader.Heard). One heard from within bound
// is healthy, one heard from longer ago unreachable, one never heard
// from unknown; no lag is given (this node's log need not be the
// leader's).
func (w *PeerWatch) Contacts(ids []string, bound time.Duration, leader FormerLeader) []replica.PeerStatus {
	now := w.now()
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]replica.PeerStatus, 0, len(ids))
	for _, id := range ids {
		var heard time.Time
		if r, ok := w.peers[id]; ok {
			heard = r.answered
			if r.voted.After(heard) {
				heard = r.voted
			}
		}
		if id == leader.ID && leader.Heard.After(heard) {
			heard = leader.Heard
		}
		st := replica.PeerStatus{ID: id, State: replica.PeerUnknown}
		if !heard.IsZero() {
			st.Contacted, st.LastContact = true, max(0, now.Sub(heard))
			st.State = replica.PeerHealthy
			if st.LastContact > bound {
				st.State = replica.PeerUnreachable
			}
		}
		out = append(out, st)
	}
	return out
}

// Forget drops the records of peers not in ids (removed members).
func (w *PeerWatch) Forget(ids []string) {
	keep := make(map[string]bool, len(ids))
	for _, id := range ids {
		keep[string(id)] = true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for id := range w.peers {
		if !keep[id] {
			delete(w.peers, id)
		}
	}
}

// OtherIDs are the ids of servers other than self.
func OtherIDs(servers []replica.Server, self string) []string {
	ids := make([]string, 0, len(servers))
	for _, s := range servers {
		if s.ID != self {
			ids = append(ids, s.ID)
		}
	}
	return ids
}
