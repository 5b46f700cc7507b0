package membership

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/replica"
)

// fakePeers answers Members with what a test puts in it, and counts the
// calls.
type fakePeers struct {
	mu      sync.Mutex
	members map[string]api.MembersResponse // by client address
	asked   []string
}

func (p *fakePeers) Identity(context.Context, string) (api.Identity, error) {
	return api.Identity{}, errors.New("fakePeers: no identity")
}

func (p *fakePeers) Announce(context.Context, string, api.JoinRequest) error { return nil }

func (p *fakePeers) Members(_ context.Context, addr string) (api.MembersResponse, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.asked = append(p.asked, addr)
	m, ok := p.members[addr]
	if !ok {
		return m, fmt.Errorf("fakePeers: nobody at %s", addr)
	}
	return m, nil
}

// health is the members' states as "id:state[/last_contact_ms/lag]",
// and who the view is from.
func health(r api.MembersResponse) string {
	var out []string
	for _, m := range r.Members {
		s := m.ID + ":" + m.State
		if m.LastContactMs != nil {
			s += fmt.Sprintf("/%d/%d", *m.LastContactMs, *m.LagEntries)
		}
		if m.Leader {
			s += "*"
		}
		out = append(out, s)
	}
	return fmt.Sprintf("%s from %q", strings.Join(out, " "), r.HealthFrom)
}

// TestMembersHealth (issue 26.4): the members answer gives each node's
// state as the leader sees it. On the leader: its own peers' last contact
// and lag, unreachable past the bound. On a follower: the leader's view,
// asked of it; a leader that does not answer leaves every member unknown
// but the leader this node hears from; and a leader this node has stopped
// hearing from is neither named nor shown as leader, but as unreachable.
func TestMembersHealth(t *testing.T) {
	peers := &fakePeers{members: map[string]api.MembersResponse{}}
	s, log := newTestCluster(t, func(c *Config) { c.Peers = peers })
	ctx := context.Background()
	log.SetPeers([]replica.PeerStatus{
		{ID: "n2", State: replica.PeerHealthy, Contacted: true, LastContact: 120 * time.Millisecond, LagKnown: true, Lag: 3},
		{ID: "n3", State: replica.PeerUnreachable, Contacted: true, LastContact: 2500 * time.Millisecond, LagKnown: true, Lag: 40},
		{ID: "n4", State: replica.PeerUnknown},
	})
	for _, id := range []string{"n2", "n3"} { // their client addresses, as they announce them
		if _, e := s.Announce(ctx, api.JoinRequest{ID: id, RaftAddr: id, ClientAddr: id + ":7470"}); e != nil {
			t.Fatal(e.Message)
		}
	}
	members := func() api.MembersResponse {
		t.Helper()
		m, e := s.Members(ctx)
		if e != nil {
			t.Fatal(e.Message)
		}
		return m
	}
	lead := members()
	if got, want := health(lead), `n1:leader* n2:healthy/120/3 n3:unreachable/2500/40 n4:unknown from "n1"`; got != want || lead.UnreachableAfterMs != 1000 {
		t.Fatalf("on the leader: %s (unreachable after %d ms), want %s (1000)", got, lead.UnreachableAfterMs, want)
	}

	// n1 follows n2 now; n2 answers with its view, which is taken whole.
	view := lead
	view.Node, view.HealthFrom, view.Leader = "n2", "n2", "n2"
	view.Members = []api.Member{
		{ID: "n1", State: api.MemberHealthy, LastContactMs: new(int64), LagEntries: new(uint64)},
		{ID: "n2", State: api.MemberLeader, Leader: true},
		{ID: "n3", State: api.MemberUnreachable},
	}
	peers.members["n2:7470"] = view
	log.Follow("n2", false)
	got := members()
	if h, want := health(got), `n1:healthy/0/0 n2:leader* n3:unreachable n4:unknown from "n2"`; h != want || got.Leader != "n2" || got.LeaderAddr != "n2:7470" {
		t.Fatalf("on a follower: %s, leader %q at %q; want %s, n2 at n2:7470", h, got.Leader, got.LeaderAddr, want)
	}

	// A view at second hand (n2 answering with another node's view) is
	// not taken: only what n1 knows itself.
	view.HealthFrom = "n3"
	peers.members["n2:7470"] = view
	if h, want := health(members()), `n1:unknown n2:leader* n3:unknown n4:unknown from ""`; h != want {
		t.Fatalf("second-hand view: %s, want %s", h, want)
	}

	// n2 stops answering; n1 has not heard from it for a heartbeat
	// timeout: n2 is not the leader any more, and is unreachable. n1 does
	// not ask a leader it does not hear from.
	delete(peers.members, "n2:7470")
	log.Follow("n2", true)
	peers.asked = nil
	got = members()
	if h, want := health(got), `n1:unknown n2:unreachable n3:unknown n4:unknown from ""`; h != want || got.Leader != "" || got.LeaderAddr != "" {
		t.Fatalf("silent leader: %s, leader %q at %q; want %s, none", h, got.Leader, got.LeaderAddr, want)
	}
	if len(peers.asked) != 0 {
		t.Fatalf("asked a silent leader: %v", peers.asked)
	}
}
