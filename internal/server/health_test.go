package server

import (
	"encoding/json"
	"io"
	"math"
	"net/http"
	"strconv"
	"testing"

	"github.com/fencelock/fencelock/api"
)

// members is n's GET /v1/cluster/members, decoded.
func (n *clusterNode) members(t *testing.T) api.MembersResponse {
	t.Helper()
	resp, err := http.Get(n.url + api.PathMembers)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var m api.MembersResponse
	if resp.StatusCode != 200 || json.Unmarshal(body, &m) != nil {
		t.Fatalf("members on %s: %d %s", n.id, resp.StatusCode, body)
	}
	return m
}

func memberOf(m api.MembersResponse, id string) api.Member {
	for _, x := range m.Members {
		if x.ID == id {
			return x
		}
	}
	return api.Member{}
}

// TestClusterMembersShowEachNodesHealth (issue 26.4), on raft's in-memory
// transport: the leader shows its followers healthy with their last
// contact and lag, and a follower cut off as unreachable, never before
// its silence passed the bound; a follower's answer carries the leader's
// view; the per-peer metrics say the same. Then the leader is cut off: on
// the new leader and its follower the old one is unreachable and not the
// leader.
func TestClusterMembersShowEachNodesHealth(t *testing.T) {
	c := startCluster(t, 3, nil)
	l := c.leader()
	f1, f2 := c.others(l)[0], c.others(l)[1]
	eventually(t, "both followers healthy on the leader", func() bool {
		m := l.members(t)
		a, b := memberOf(m, f1.id), memberOf(m, f2.id)
		return m.HealthFrom == l.id && memberOf(m, l.id).State == api.MemberLeader &&
			a.State == api.MemberHealthy && b.State == api.MemberHealthy && a.LagEntries != nil && a.LastContactMs != nil
	})
	if m := l.members(t); m.UnreachableAfterMs != 200 {
		t.Fatalf("unreachable after %d ms; want twice the 100ms heartbeat timeout", m.UnreachableAfterMs)
	}
	if got := l.metric("fencelock_peer_unreachable", "peer", f2.id); got != 0 {
		t.Fatalf("fencelock_peer_unreachable{peer=%s} = %v before the cut", f2.id, got)
	}

	c.isolate(f2)
	var seen api.Member
	eventually(t, f2.id+" unreachable on the leader", func() bool {
		seen = memberOf(l.members(t), f2.id)
		return seen.State == api.MemberUnreachable
	})
	if seen.LastContactMs == nil || *seen.LastContactMs < 200 { // whole ms, truncated
		t.Fatalf("%s shown unreachable with last contact %s ms; the bound is 200", f2.id, fmtMs(seen.LastContactMs))
	}
	if got := l.metric("fencelock_peer_last_contact_seconds", "peer", f2.id); got <= 0.2 || math.IsInf(got, 0) {
		t.Fatalf("fencelock_peer_last_contact_seconds{peer=%s} = %v", f2.id, got)
	}
	if l.metric("fencelock_peer_unreachable", "peer", f2.id) != 1 || l.metric("fencelock_peer_unreachable", "peer", f1.id) != 0 {
		t.Fatal("fencelock_peer_unreachable does not say which peer is cut off")
	}
	eventually(t, "the follower to show the leader's view", func() bool {
		m := f1.members(t)
		return m.HealthFrom == l.id && memberOf(m, f2.id).State == api.MemberUnreachable &&
			memberOf(m, f1.id).State == api.MemberHealthy && memberOf(m, l.id).State == api.MemberLeader
	})
	if f2.metric("fencelock_peer_last_contact_seconds", "peer", l.id) != 0 {
		t.Fatal("a follower has peer series; only the leader hears from every peer")
	}

	c.heal()
	eventually(t, f2.id+" healthy again", func() bool { return memberOf(l.members(t), f2.id).State == api.MemberHealthy })
	old := c.isolateLeader()
	nl := c.leader(c.others(old)...)
	other := c.others(old)[0]
	if other == nl {
		other = c.others(old)[1]
	}
	eventually(t, "the old leader unreachable on the new one", func() bool {
		m := nl.members(t)
		o := memberOf(m, old.id)
		return m.Leader == nl.id && o.State == api.MemberUnreachable && !o.Leader
	})
	// From now on, nobody that hears from the new leader shows the old
	// one as leader.
	for i := range 20 {
		for _, n := range []*clusterNode{nl, other} {
			m := n.members(t)
			if o := memberOf(m, old.id); o.Leader || m.Leader == old.id || o.State == api.MemberLeader {
				t.Fatalf("read %d: %s shows the old leader %s as leader: %+v", i, n.id, old.id, m)
			}
		}
	}
}

func fmtMs(p *int64) string {
	if p == nil {
		return "none"
	}
	return strconv.FormatInt(*p, 10)
}
