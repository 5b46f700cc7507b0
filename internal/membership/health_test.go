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
			s += fmt.Sprintf("/%d", *m.LastContactMs)
		}
		if m.LagEntries != nil {
			s += fmt.Sprintf("/%d", *m.LagEntries)
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
	// not taken: only what n1 knows itself (its own view, which has
	// heard from nobody yet), with n2 still the leader it hears from.
	view.HealthFrom = "n3"
	peers.members["n2:7470"] = view
	got = members()
	if h, want := health(got), `n1:healthy n2:leader* n3:unknown n4:unknown from ""`; h != want || !got.Local || got.NoLeader {
		t.Fatalf("second-hand view: %s (local %v, no leader %v), want %s (local, a leader)", h, got.Local, got.NoLeader, want)
	}

	// n2 stops answering; n1 has not heard from it for a heartbeat
	// timeout: n2 is not the leader any more, and is unreachable. n1 does
	// not ask a leader it does not hear from.
	delete(peers.members, "n2:7470")
	log.Follow("n2", true)
	peers.asked = nil
	got = members()
	if h, want := health(got), `n1:healthy n2:unreachable n3:unknown n4:unknown from ""`; h != want || got.Leader != "" || got.LeaderAddr != "" || !got.NoLeader || !got.Local {
		t.Fatalf("silent leader: %s, leader %q at %q (no leader %v, local %v); want %s, none", h, got.Leader, got.LeaderAddr, got.NoLeader, got.Local, want)
	}
	if len(peers.asked) != 0 {
		t.Fatalf("asked a silent leader: %v", peers.asked)
	}
}

// slowPeers answers no Members call: each waits until its context ends,
// as a leader that is SIGSTOPped (or whose host is gone) does; it records
// how long the caller gave it.
type slowPeers struct {
	fakePeers
	gave []time.Duration
}

func (p *slowPeers) Members(ctx context.Context, addr string) (api.MembersResponse, error) {
	d, ok := ctx.Deadline()
	p.mu.Lock()
	p.asked = append(p.asked, addr)
	if ok {
		p.gave = append(p.gave, time.Until(d))
	} else {
		p.gave = append(p.gave, -1)
	}
	p.mu.Unlock()
	<-ctx.Done()
	return api.MembersResponse{}, ctx.Err()
}

// TestMembersWithoutALeader (issue 44.1): a node that hears from no
// leader answers its own view at once — every member, when it last heard
// from each itself, its role and term, and no_leader — without asking
// anyone. A former leader heard from every peer that answered it; a
// follower from the leader it followed. A leader that is still named but
// does not answer is given UnreachableAfter, not more, and the node then
// answers its own view too.
func TestMembersWithoutALeader(t *testing.T) {
	peers := &slowPeers{}
	s, log := newTestCluster(t, func(c *Config) { c.Peers = peers })
	ctx := context.Background()
	log.SetPeers([]replica.PeerStatus{{ID: "n2"}, {ID: "n3"}})
	for _, id := range []string{"n2", "n3"} {
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

	// n1 led, and lost n2 and n3: it steps down and knows no leader.
	log.SetTerm(4)
	log.SetContacts([]replica.PeerStatus{
		{ID: "n2", State: replica.PeerUnreachable, Contacted: true, LastContact: 4200 * time.Millisecond},
		{ID: "n3", State: replica.PeerUnreachable, Contacted: true, LastContact: 4100 * time.Millisecond},
	})
	log.Lose()
	got := members()
	if h, want := health(got), `n1:healthy n2:unreachable/4200 n3:unreachable/4100 from ""`; h != want {
		t.Fatalf("a former leader's own view: %s, want %s", h, want)
	}
	if !got.NoLeader || !got.Local || got.Leader != "" || got.Ready || got.Role != api.RoleFollower || got.Term != 4 {
		t.Fatalf("a former leader without quorum: %+v", got)
	}

	// n1 followed n2, which is gone; n1 never heard from n3.
	log.SetContacts([]replica.PeerStatus{
		{ID: "n2", State: replica.PeerUnreachable, Contacted: true, LastContact: 3 * time.Second},
		{ID: "n3", State: replica.PeerUnknown},
	})
	log.Follow("n2", true)
	got = members()
	if h, want := health(got), `n1:healthy n2:unreachable/3000 n3:unknown from ""`; h != want || !got.NoLeader || !got.Local {
		t.Fatalf("a follower's own view: %s (no leader %v, local %v), want %s", h, got.NoLeader, got.Local, want)
	}
	if len(peers.asked) != 0 {
		t.Fatalf("a node that knows no leader asked %v", peers.asked)
	}

	// Within a heartbeat timeout of its last append, n2 is still the
	// leader n1 hears from: n1 asks it, for UnreachableAfter at most,
	// and then answers its own view with n2 as the leader.
	log.SetContacts([]replica.PeerStatus{
		{ID: "n2", State: replica.PeerHealthy, Contacted: true, LastContact: 40 * time.Millisecond},
		{ID: "n3", State: replica.PeerUnknown},
	})
	log.Follow("n2", false)
	got = members()
	if h, want := health(got), `n1:healthy n2:leader/40* n3:unknown from ""`; h != want || got.NoLeader || !got.Local {
		t.Fatalf("a leader that does not answer: %s (no leader %v, local %v), want %s", h, got.NoLeader, got.Local, want)
	}
	if len(peers.gave) != 1 || peers.gave[0] <= 0 || peers.gave[0] > log.UnreachableAfter() {
		t.Fatalf("the leader was asked with %v to answer; want at most %v", peers.gave, log.UnreachableAfter())
	}
}
