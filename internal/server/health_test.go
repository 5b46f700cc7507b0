package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/api"
)

// members is n's GET /v1/cluster/members, decoded.
func (n *clusterNode) members(t *testing.T) api.MembersResponse {
	t.Helper()
	// A node that does not lead answers only once it has confirmed the
	// leader's ACL revision (issue 24): just after an election it may
	// know no leader for a moment and answer 503; ask again.
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(n.url + api.PathMembers)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusServiceUnavailable && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		var m api.MembersResponse
		if resp.StatusCode != 200 || json.Unmarshal(body, &m) != nil {
			t.Fatalf("members on %s: %d %s", n.id, resp.StatusCode, body)
		}
		return m
	}
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
	if m := l.members(t); m.UnreachableAfterMs != 600 {
		t.Fatalf("unreachable after %d ms; want twice the 300ms heartbeat timeout", m.UnreachableAfterMs)
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
	if seen.LastContactMs == nil || *seen.LastContactMs < 600 { // whole ms, truncated
		t.Fatalf("%s shown unreachable with last contact %s ms; the bound is 600", f2.id, fmtMs(seen.LastContactMs))
	}
	if got := l.metric("fencelock_peer_last_contact_seconds", "peer", f2.id); got <= 0.6 || math.IsInf(got, 0) {
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

// TestClusterRemovedNodeSaysSo (issue 26.5): a node removed with
// cluster remove kept running, answered not_leader and never logged that
// it was removed. Now it logs it, answers every call (and /readyz)
// 503 removed, and its members answer says it is no longer a member.
func TestClusterRemovedNodeSaysSo(t *testing.T) {
	logs := map[string]*syncBuffer{}
	c := startCluster(t, 3, func(cfg *Config) {
		b := &syncBuffer{}
		logs[cfg.NodeID] = b
		cfg.Logger = slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelWarn}))
	})
	l := c.leader()
	victim := c.others(l)[0]
	eventually(t, "every member's client address on the leader", func() bool {
		for _, m := range l.members(t).Members {
			if m.ClientAddr == "" {
				return false
			}
		}
		return true
	})
	if a, _ := c.send(nil, "POST", "/v1/cluster/remove", fmt.Sprintf(`{"id":%q}`, victim.id)); a.status != 200 {
		t.Fatalf("remove %s: %d %v", victim.id, a.status, a.body)
	}
	eventually(t, victim.id+" to answer removed", func() bool {
		a := victim.get("/v1/lock?key=k")
		return a.status == 503 && a.body["code"] == api.CodeRemoved
	})
	for _, r := range []struct{ method, path, body string }{
		{"GET", "/readyz", ""},
		{"GET", "/v1/locks", ""},
		{"POST", "/v1/acquire", acquireBody("k", "a", 60000, "")},
		{"POST", "/v1/release", `{"key":"k","holder":"a"}`},
	} {
		a := victim.do(context.Background(), r.method, r.path, r.body)
		if a.status != 503 || a.body["code"] != api.CodeRemoved || !strings.Contains(fmt.Sprint(a.body["error"]), "removed from the cluster") {
			t.Fatalf("%s %s on the removed node: %d %v", r.method, r.path, a.status, a.body)
		}
	}
	m := victim.members(t)
	if !m.Removed || memberOf(m, victim.id).ID != "" || len(m.Members) != 2 {
		t.Fatalf("members on the removed node: %+v", m)
	}
	// Its view of the others is the leader's, not its own (it hears
	// from nobody now).
	eventually(t, "the leader's view on the removed node", func() bool {
		m := victim.members(t)
		for _, n := range c.others(victim) {
			if s := memberOf(m, n.id).State; s != api.MemberHealthy && s != api.MemberLeader {
				return false
			}
		}
		return m.HealthFrom != "" && m.HealthFrom != victim.id
	})
	// The node logs it when it sees a configuration without itself (its
	// own check of the membership, on a ticker), which may come after it
	// first answered removed.
	eventually(t, "the removed node to log its removal", func() bool {
		return strings.Contains(logs[victim.id].String(), "this node was removed from the cluster")
	})
	// The others go on without it, and do not call themselves removed.
	if a, _ := c.send(c.others(victim), "POST", "/v1/acquire", acquireBody("k", "a", 60000, "")); a.status != 200 {
		t.Fatalf("acquire after the removal: %d %v", a.status, a.body)
	}
	for _, n := range c.others(victim) {
		if m := n.members(t); m.Removed {
			t.Fatalf("%s calls itself removed: %+v", n.id, m)
		}
	}
}
