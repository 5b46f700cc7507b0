package etcd

import "testing"

// The survivors of a lost leader are ranked apart from it, by member id,
// whatever order the configuration lists them in.
func TestFailoverSlot(t *testing.T) {
	voters := []uint64{30, 10, 20}
	for _, c := range []struct {
		lost, self uint64
		want       int
	}{
		{lost: 30, self: 10, want: 0},
		{lost: 30, self: 20, want: 1},
		{lost: 10, self: 20, want: 0},
		{lost: 10, self: 30, want: 1},
		{lost: 0, self: 30, want: 2},   // no leader known yet: every voter ranked
		{lost: 10, self: 10, want: -1}, // the lost leader itself
		{lost: 10, self: 40, want: -1}, // not a voter
	} {
		if got := failoverSlot(voters, c.lost, c.self); got != c.want {
			t.Errorf("failoverSlot(%v, lost %d, self %d) = %d, want %d", voters, c.lost, c.self, got, c.want)
		}
	}
	if voters[0] != 30 {
		t.Errorf("failoverSlot reordered the voters it was given: %v", voters)
	}
}

// A follower forgets its silent leader at 0.6 of an election timeout and
// campaigns at 0.8 plus 0.2 per slot — slot 1 no later than raft's own
// timer can (one to two timeouts) — once each, and never while it has a
// leader or holds no slot.
func TestFailoverStep(t *testing.T) {
	type step struct{ forget, campaign bool }
	at := func(led bool, slot int) map[int]step {
		got := map[int]step{}
		for quiet := 1; quiet <= 3*etcdElectionTick; quiet++ {
			if f, c := failoverStep(quiet, led, slot); f || c {
				got[quiet] = step{f, c}
			}
		}
		return got
	}
	check := func(name string, got map[int]step, want map[int]step) {
		t.Helper()
		if len(got) != len(want) {
			t.Errorf("%s: %v, want %v", name, got, want)
			return
		}
		for q, s := range want {
			if got[q] != s {
				t.Errorf("%s: %v, want %v", name, got, want)
				return
			}
		}
	}
	check("led, slot 0", at(true, 0), map[int]step{6: {forget: true}})
	check("leaderless, slot 0", at(false, 0), map[int]step{8: {campaign: true}})
	check("leaderless, slot 1", at(false, 1), map[int]step{10: {campaign: true}})
	check("leaderless, no slot", at(false, -1), map[int]step{})
	if campaignTick+campaignStagger > etcdElectionTick {
		t.Errorf("slot 1 campaigns at tick %d, later than raft's own timer can (%d)", campaignTick+campaignStagger, etcdElectionTick)
	}
}
