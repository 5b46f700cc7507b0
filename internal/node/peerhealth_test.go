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
