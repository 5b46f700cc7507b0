package server

import (
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/fencelock/fencelock/api"
)

// TestClusterMembersWithoutQuorum (issue 44.1): with two of three nodes
// stopped, GET /v1/cluster/members on the survivor answered 503
// not_leader ("knows no leader yet; retry") however long it was asked,
// so `cluster members` showed nothing just when an operator needed the
// picture. Now the survivor answers 200 with its own view: every member
// it knows, when it last heard from each, its term and applied index,
// and no_leader. The survivor is the former leader (it heard from both
// peers while it led) or a follower (it heard from the leader it
// followed); both engines (FENCELOCK_TEST_ENGINE=etcd).
func TestClusterMembersWithoutQuorum(t *testing.T) {
	for _, survivor := range []string{"leader", "follower"} {
		t.Run(survivor, func(t *testing.T) {
			c := startCluster(t, 3, nil)
			l := c.leader()
			c.announced(l)
			if a, _ := c.send(nil, "POST", "/v1/acquire", acquireBody("k", "a", 60000, "")); a.status != 200 {
				t.Fatalf("acquire: %d %v", a.status, a.body)
			}
			s := l
			if survivor == "follower" {
				s = c.others(l)[0]
			}
			for _, n := range c.others(s) {
				n.stop()
			}
			// Every answer is 200. The stopped nodes are healthy in the
			// survivor's eyes until it has not heard from them for the
			// bound (a leader that was silent for a heartbeat timeout is
			// unreachable from then on).
			var m api.MembersResponse
			eventually(t, s.id+" to answer that it knows no leader, and has not heard from the others", func() bool {
				m = membersNow(t, s)
				for _, x := range m.Members {
					if x.ID != s.id && (x.State == api.MemberHealthy || x.State == api.MemberLeader) {
						return false
					}
				}
				return m.NoLeader
			})
			// Whom the survivor last followed, or whether it led, read
			// now: on a loaded machine leadership may have moved before
			// the others stopped.
			former := s.node.Status().FormerLeader
			led := former == ""
			start := time.Now()
			m = membersNow(t, s)
			t.Logf("figure: GET %s on the survivor answered in %v", api.PathMembers, time.Since(start).Round(10*time.Microsecond))
			if !m.NoLeader || m.Leader != "" || m.Ready || !m.Local || m.HealthFrom != "" || m.Node != s.id {
				t.Fatalf("the survivor's answer: %+v", m)
			}
			if m.Term == 0 || m.AppliedIndex == 0 || m.Role == "" || m.Role == api.RoleLeader {
				t.Fatalf("the survivor's term %d, applied index %d, role %q", m.Term, m.AppliedIndex, m.Role)
			}
			if len(m.Members) != 3 {
				t.Fatalf("the survivor lists %d members: %+v", len(m.Members), m.Members)
			}
			for _, x := range m.Members {
				if x.RaftAddr == "" || x.ClientAddr == "" || x.Leader {
					t.Errorf("member %+v", x)
				}
				if x.ID == s.id {
					if x.State != api.MemberHealthy {
						t.Errorf("the survivor shows itself %s", x.State)
					}
					continue
				}
				if x.State == api.MemberHealthy || x.State == api.MemberLeader {
					t.Errorf("stopped %s shows %s", x.ID, x.State)
				}
				// What the survivor heard itself: every peer, if it led;
				// the leader it followed, if it followed. A leader
				// elected while the others were being stopped (failovers
				// take half a second) may have been stopped before the
				// survivor heard from it: it knows that leader's name,
				// from its vote or one answer, but may never have been
				// sent anything by it, and "unknown" is then the truth.
				if !led && x.ID == former && former != l.id && x.State == api.MemberUnknown {
					t.Logf("%s led after %s, while the others stopped, and the survivor never heard from it", former, l.id)
					continue
				}
				// The same the other way round: the survivor itself was
				// elected after l while the others were being stopped
				// (it names no former leader, it led), and a peer
				// stopped before it sent the new leader anything is
				// unknown to it (seen once in a full run at load 3).
				if led && s.id != l.id && x.State == api.MemberUnknown {
					t.Logf("%s led after %s, while the others stopped, and never heard from %s", s.id, l.id, x.ID)
					continue
				}
				if (led || x.ID == former) && (x.State != api.MemberUnreachable || x.LastContactMs == nil) {
					t.Errorf("stopped %s: %s, last contact %s ms; want unreachable, with when it was last heard from (the leader first seen %s, the survivor's former leader %q)", x.ID, x.State, fmtMs(x.LastContactMs), l.id, former)
				}
			}
		})
	}
}

// membersNow is one GET /v1/cluster/members on n, which must answer 200.
func membersNow(t *testing.T, n *clusterNode) api.MembersResponse {
	t.Helper()
	resp, err := http.Get(n.url + api.PathMembers)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var m api.MembersResponse
	if resp.StatusCode != 200 || json.Unmarshal(body, &m) != nil {
		t.Fatalf("members on %s: %d %s", n.id, resp.StatusCode, body)
	}
	return m
}

// TestClusterMembersWithoutQuorumChecksTheCaller: with ACLs on, the
// survivor of a cluster without quorum still answers members only to a
// principal, checked against the tables it has applied (no leader can
// confirm them now): a known token is answered 200 with its view, none
// or an unknown one 401.
func TestClusterMembersWithoutQuorumChecksTheCaller(t *testing.T) {
	c := startCluster(t, 3, nil)
	l := c.leader()
	admin := l.bootstrap()
	viewer := l.token(admin, "viewer")
	s := c.others(l)[0]
	eventually(t, s.id+" to have the ACLs", func() bool {
		return s.authDo("GET", api.PathMembers, "", "").status == http.StatusUnauthorized &&
			s.authDo("GET", api.PathMembers, "", viewer).status == http.StatusOK
	})
	for _, n := range c.others(s) {
		n.stop()
	}
	eventually(t, s.id+" to answer that it knows no leader", func() bool {
		a := s.authDo("GET", api.PathMembers, "", viewer)
		if a.status != http.StatusOK {
			t.Fatalf("members with a token on the survivor: %d %v", a.status, a.body)
		}
		return a.body["no_leader"] == true
	})
	for _, token := range []string{"", "flk_unknown"} {
		if a := s.authDo("GET", api.PathMembers, "", token); a.status != http.StatusUnauthorized {
			t.Errorf("members with token %q on the survivor: %d %v", token, a.status, a.body)
		}
	}
}
