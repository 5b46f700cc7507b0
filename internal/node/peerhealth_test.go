package node

import (
	"fmt"
	"testing"
	"time"
)

// TestPeerHealthFromAnswers drives PeerWatch on a fake clock as a leader's
// transport would: a peer that answers is healthy with its lag; one that
// stops answering is unreachable once the bound has passed since its last
// answer, and not a moment before; one that never answered in this term is
// unknown until the bound has passed since the first try; an answer to an
// older term's request is ignored; a new term starts the peer's record
// over (it was heard from in another term, not this one).
func TestPeerHealthFromAnswers(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0
	w := NewPeerWatch(func() time.Time { return now })
	const bound = time.Second
	at := func(d time.Duration) { now = t0.Add(d) }
	answer := func(id string, term, lastLog uint64) {
		w.Sent(id, term)
		w.Answered(id, term, lastLog)
	}
	var former FormerLeader
	show := func(term, last uint64) string {
		var out []string
		for _, p := range w.Status([]string{"a", "b", "c"}, term, last, bound, former) {
			s := fmt.Sprintf("%s:%s", p.ID, p.State)
			if p.Contacted {
				s += fmt.Sprintf("/%v", p.LastContact)
			}
			if p.LagKnown {
				s += fmt.Sprintf("/lag%d", p.Lag)
			}
			out = append(out, s)
		}
		return fmt.Sprint(out)
	}
	check := func(term, last uint64, want string) {
		t.Helper()
		if got := show(term, last); got != want {
			t.Fatalf("at %v term %d: %s, want %s", now.Sub(t0), term, got, want)
		}
	}

	check(2, 10, "[a:unknown b:unknown c:unknown]") // nothing sent yet
	answer("a", 2, 10)
	w.Sent("b", 2) // b never answers
	check(2, 10, "[a:healthy/0s/lag0 b:unknown c:unknown]")
	at(600 * time.Millisecond)
	answer("a", 2, 7)
	check(2, 12, "[a:healthy/0s/lag5 b:unknown c:unknown]")
	at(1600 * time.Millisecond) // a silent for exactly the bound: still healthy
	check(2, 12, "[a:healthy/1s/lag5 b:unreachable c:unknown]")
	at(1600*time.Millisecond + 1)
	check(2, 12, "[a:unreachable/1.000000001s/lag5 b:unreachable c:unknown]")

	// A request of term 2 answered after term 3 began is not an answer of
	// term 3.
	w.Sent("a", 3)
	w.Answered("a", 2, 12)
	check(3, 12, "[a:unknown/1.000000001s/lag5 b:unknown c:unknown]")
	at(2700 * time.Millisecond) // the bound since a's first try in term 3
	check(3, 12, "[a:unreachable/2.1s/lag5 b:unknown c:unknown]")
	answer("a", 3, 12)
	check(3, 12, "[a:healthy/0s/lag0 b:unknown c:unknown]")

	// This node led after following c, which it last heard from at
	// 2.5s: c is unreachable once the bound has passed since then, before
	// this leader has tried it for a whole bound itself.
	former = FormerLeader{ID: "c", Heard: t0.Add(2500 * time.Millisecond)}
	w.Sent("c", 3)
	check(3, 12, "[a:healthy/0s/lag0 b:unknown c:unknown/200ms]")
	at(3500 * time.Millisecond)
	check(3, 12, "[a:healthy/800ms/lag0 b:unknown c:unknown/1s]")
	at(3500*time.Millisecond + 1)
	check(3, 12, "[a:healthy/800.000001ms/lag0 b:unknown c:unreachable/1.000000001s]")
	answer("c", 3, 11) // it was alive after all
	check(3, 12, "[a:healthy/800.000001ms/lag0 b:unknown c:healthy/0s/lag1]")

	w.Forget([]string{"a"}) // b and c were removed
	if len(w.peers) != 1 {
		t.Fatalf("records kept after forget: %v", w.peers)
	}
}

// TestPeerContactsWhateverTheRole (issue 44.1): a node that does not lead
// says when it last heard from each peer itself. A former leader heard
// from every peer that answered its appends, in any term; a follower from
// the leader it followed (by that leader's appends); a candidate from the
// voters that answered its vote requests, granted or not. Healthy within
// the bound, unreachable after it, unknown if never heard from.
func TestPeerContactsWhateverTheRole(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0
	w := NewPeerWatch(func() time.Time { return now })
	const bound = time.Second
	at := func(d time.Duration) { now = t0.Add(d) }
	var leader FormerLeader
	check := func(want string) {
		t.Helper()
		var out []string
		for _, p := range w.Contacts([]string{"a", "b", "c", "d"}, bound, leader) {
			s := fmt.Sprintf("%s:%s", p.ID, p.State)
			if p.Contacted {
				s += fmt.Sprintf("/%v", p.LastContact)
			}
			if p.LagKnown {
				s += "/lag?"
			}
			out = append(out, s)
		}
		if got := fmt.Sprint(out); got != want {
			t.Fatalf("at %v: %s, want %s", now.Sub(t0), got, want)
		}
	}

	check("[a:unknown b:unknown c:unknown d:unknown]")
	// While it led in term 2, a and b answered; c never did.
	w.Sent("a", 2)
	w.Answered("a", 2, 10)
	w.Sent("b", 2)
	w.Answered("b", 2, 9)
	w.Sent("c", 2)
	at(500 * time.Millisecond)
	w.Answered("a", 2, 11)
	check("[a:healthy/0s b:healthy/500ms c:unknown d:unknown]")
	at(1500 * time.Millisecond) // a silent for exactly the bound; b for longer
	check("[a:healthy/1s b:unreachable/1.5s c:unknown d:unknown]")

	// It followed d since, and last heard from it at 1.4 s.
	leader = FormerLeader{ID: "d", Heard: t0.Add(1400 * time.Millisecond)}
	check("[a:healthy/1s b:unreachable/1.5s c:unknown d:healthy/100ms]")
	// d is gone; as a candidate it hears from c by its vote answer.
	at(2000 * time.Millisecond)
	w.Voted("c")
	check("[a:unreachable/1.5s b:unreachable/2s c:healthy/0s d:healthy/600ms]")
	at(3000 * time.Millisecond)
	w.Voted("a") // newer than its last answer to an append
	check("[a:healthy/0s b:unreachable/3s c:healthy/1s d:unreachable/1.6s]")
	// The latest of the leader's appends and the peer's own answers counts.
	leader = FormerLeader{ID: "b", Heard: t0.Add(100 * time.Millisecond)}
	check("[a:healthy/0s b:unreachable/2.9s c:healthy/1s d:unknown]")
}
