package hashicorp

import (
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// The voters other than the leader are ranked by ID, whatever order the
// configuration lists them in.
func TestSlotOf(t *testing.T) {
	voters := []raft.ServerID{"n3", "n1", "n2"}
	for _, c := range []struct {
		leader, self raft.ServerID
		want         int
	}{
		{"n3", "n1", 0}, {"n3", "n2", 1}, {"n1", "n2", 0}, {"n1", "n3", 1},
		{"n1", "n1", -1}, // the leader itself
		{"n1", "n4", -1}, // not a voter
	} {
		if got := slotOf(voters, c.leader, c.self); got != c.want {
			t.Errorf("slotOf(%v, leader %s, self %s) = %d, want %d", voters, c.leader, c.self, got, c.want)
		}
	}
	if voters[0] != "n3" {
		t.Errorf("slotOf reordered the voters it was given: %v", voters)
	}
}

// The watch's rule on a clock of its own: a follower gets its slot's
// heartbeat timeout when its leader changes, sleeps until that long after
// the last contact, and makes raft look then, once per contact; a leader
// has slot 0's timeout; with no leader known it leaves raft alone.
func TestLossWatchDecide(t *testing.T) {
	const hb = 500 * time.Millisecond
	w := &lossWatch{heartbeat: hb, election: hb, timeout: hb}
	t0 := time.Unix(1000, 0)
	slots := map[raft.ServerID]int{"n1": 1, "n3": 0}
	asked := 0
	slot := func(leader raft.ServerID) int { asked++; return slots[leader] }
	look := func(state raft.RaftState, leader raft.ServerID, contact, now time.Duration) decision {
		t.Helper()
		return w.decide(look{state: state, leader: leader, contact: t0.Add(contact), now: t0.Add(now), slot: slot})
	}
	want := func(got, want decision) {
		t.Helper()
		if got != want {
			t.Fatalf("decided %+v, want %+v", got, want)
		}
	}

	// Following n1 in slot 1: 600ms after each contact.
	want(look(raft.Follower, "n1", 0, 10*time.Millisecond), decision{timeout: 600 * time.Millisecond, next: 590 * time.Millisecond})
	want(look(raft.Follower, "n1", 550*time.Millisecond, 600*time.Millisecond), decision{next: 550 * time.Millisecond})
	if asked != 1 {
		t.Fatalf("the slot was asked %d times for one leader, want once", asked)
	}
	// n1 silent for 600ms: raft is made to look, once for that contact.
	want(look(raft.Follower, "n1", 550*time.Millisecond, 1150*time.Millisecond), decision{poke: true, next: hb / 4})
	want(look(raft.Follower, "n1", 550*time.Millisecond, 1300*time.Millisecond), decision{next: hb / 4})
	// Raft gave n1 up: no leader, nothing set.
	want(look(raft.Candidate, "", 550*time.Millisecond, 1400*time.Millisecond), decision{next: hb / 4})
	want(look(raft.Follower, "", 550*time.Millisecond, 1500*time.Millisecond), decision{next: hb / 4})
	// Following n3 in slot 0.
	want(look(raft.Follower, "n3", 1600*time.Millisecond, 1600*time.Millisecond), decision{timeout: hb, next: hb})
	// Leading: slot 0's timeout, which it has already.
	want(look(raft.Leader, "n2", 1700*time.Millisecond, 1800*time.Millisecond), decision{next: hb / 4})
	// Following n1 again after leading: slot 1's timeout again.
	want(look(raft.Follower, "n1", 2000*time.Millisecond, 2000*time.Millisecond), decision{timeout: 600 * time.Millisecond, next: 600 * time.Millisecond})
	want(look(raft.Leader, "n2", 2100*time.Millisecond, 2100*time.Millisecond), decision{timeout: hb, next: hb / 4})
}
