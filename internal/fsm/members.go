package fsm

import (
	"encoding/binary"
	"sort"
)

// Member is one node of the cluster as the state machine knows it: raft
// reaches it at RaftAddr, clients at ClientAddr. Raft's own configuration
// says who votes; this table only lets any node name the leader's client
// address in a not_leader answer.
type Member struct {
	NodeID     string
	RaftAddr   string
	ClientAddr string
}

func (f *FSM) applyMember(c Command) {
	if c.RaftAddr == "" && c.ClientAddr == "" {
		delete(f.members, c.NodeID)
		return
	}
	f.members[c.NodeID] = Member{NodeID: c.NodeID, RaftAddr: c.RaftAddr, ClientAddr: c.ClientAddr}
}

// ClusterID is the cluster's identity: a random id the first leader of a
// cluster commits (it is in every snapshot, so every member's data dir
// keeps it), or "" on a node that has not applied it yet, such as a node
// started with --join that no cluster has added.
func (f *FSM) ClusterID() string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.cluster
}

// Members returns the known members sorted by node id.
func (f *FSM) Members() []Member {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make([]Member, 0, len(f.members))
	for _, m := range f.members {
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].NodeID < out[j].NodeID })
	return out
}

// Member returns the member with this node id.
func (f *FSM) Member(id string) (Member, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	m, ok := f.members[id]
	return m, ok
}

func appendMembers(b []byte, ms map[string]Member) []byte {
	ids := make([]string, 0, len(ms))
	for id := range ms {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	b = binary.AppendUvarint(b, uint64(len(ids)))
	for _, id := range ids {
		m := ms[id]
		b = appendString(b, m.NodeID)
		b = appendString(b, m.RaftAddr)
		b = appendString(b, m.ClientAddr)
	}
	return b
}

// readMembers reads what appendMembers wrote: members in increasing id
// order, so that a snapshot re-encodes to the same bytes (an empty list
// only when a cluster id follows; the caller checks).
func readMembers(r *reader) map[string]Member {
	n := r.count()
	ms := make(map[string]Member, n)
	last := ""
	for i := 0; i < n && r.Err() == nil; i++ {
		m := Member{NodeID: r.String(MaxNodeIDLen), RaftAddr: r.String(MaxAddrLen), ClientAddr: r.String(MaxAddrLen)}
		if i > 0 && m.NodeID <= last {
			r.fail("members out of order")
		}
		last = m.NodeID
		ms[m.NodeID] = m
	}
	return ms
}
