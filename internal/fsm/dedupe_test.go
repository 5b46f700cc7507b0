package fsm

import (
	"bytes"
	"errors"
	"testing"

	"github.com/fencelock/fencelock/internal/locktable"
)

func TestRetryWithRequestIDIsAppliedOnce(t *testing.T) {
	a, rec := newApplier(t)
	first := a.do(Command{Op: OpAcquire, RequestID: "r1", Now: 1, Key: "k", Holder: "h", TTL: 100})
	events := len(rec.evs)
	again := a.do(Command{Op: OpAcquire, RequestID: "r1", Now: 5, Key: "k", Holder: "h", TTL: 100})
	if !again.Duplicate || again.Lease != first.Lease || !again.Granted || a.f.LastToken() != 1 || len(rec.evs) != events {
		t.Fatalf("retry: %+v, last token %d", again, a.f.LastToken())
	}
	// The same id from another holder, or for another op, is a new request.
	other := a.do(Command{Op: OpAcquire, RequestID: "r1", Now: 6, Key: "k", Holder: "x", TTL: 100})
	var held *locktable.HeldError
	if other.Duplicate || !errors.As(other.Err, &held) {
		t.Fatalf("other holder: %+v", other)
	}
	rel := a.do(Command{Op: OpRelease, RequestID: "r1", Now: 7, Key: "k", Holder: "h", Token: 1})
	if rel.Duplicate || !rel.Released {
		t.Fatalf("release with a reused id: %+v", rel)
	}
	// A retried release answers released, not "nothing to release".
	rel2 := a.do(Command{Op: OpRelease, RequestID: "r1", Now: 8, Key: "k", Holder: "h", Token: 1})
	if !rel2.Duplicate || !rel2.Released {
		t.Fatalf("retried release: %+v", rel2)
	}
	// Refusals are remembered too: the retry gets the original answer.
	if r := a.do(Command{Op: OpAcquire, RequestID: "r1", Now: 9, Key: "k", Holder: "x", TTL: 100}); !r.Duplicate || !errors.As(r.Err, &held) || held.Lease.Holder != "h" {
		t.Fatalf("retried refusal: %+v", r)
	}
	// No request id: never deduplicated.
	a.do(Command{Op: OpAcquire, Now: 10, Key: "n", Holder: "h", TTL: 100})
	if r := a.do(Command{Op: OpAcquire, Now: 10, Key: "n", Holder: "h", TTL: 100}); r.Duplicate {
		t.Fatal("a command without an id was deduplicated")
	}
	// Input errors are not remembered.
	a.do(Command{Op: OpAcquire, RequestID: "bad", Now: 11, Key: "", Holder: "h", TTL: 100})
	if r := a.do(Command{Op: OpAcquire, RequestID: "bad", Now: 11, Key: "ok", Holder: "h", TTL: 100}); r.Duplicate || r.Err != nil {
		t.Fatalf("after an input error: %+v", r)
	}
	// A wait granted at once and re-sent is answered with its grant; a
	// new wait of the same holder (another id) renews under a new token.
	w := a.do(Command{Op: OpWait, RequestID: "w", Now: 12, Key: "w", Holder: "h", TTL: 100, Deadline: 1000})
	if r := a.do(Command{Op: OpWait, RequestID: "w", Now: 12, Key: "w", Holder: "h", TTL: 100, Deadline: 1000}); !r.Duplicate || r.Lease != w.Lease {
		t.Fatalf("re-sent wait: %+v, want the grant %+v", r, w.Lease)
	}
	if r := a.do(Command{Op: OpWait, RequestID: "w2", Now: 13, Key: "w", Holder: "h", TTL: 100, Deadline: 1000}); r.Duplicate || r.Lease.Token == w.Lease.Token {
		t.Fatalf("new wait of the holder: %+v, want a renewal", r)
	}
}

// TestResentWaitAfterHandOff: a wait queued under a request id is granted
// by a hand-off while its client is away (its answer lost, or its leader
// gone). The re-sent wait gets that grant and token, not a renewal; a
// re-sent wait still queued keeps its place; a release of the grant by the
// wait's id (the server's release of an unanswered grant) does nothing
// once a re-sent wait was answered with it. Replicas restored from a
// snapshot in between decide the same.
func TestResentWaitAfterHandOff(t *testing.T) {
	a, _ := newApplier(t)
	b, _ := newApplier(t)
	both := func(c Command) (*Result, *Result) { return a.do(c), b.do(c) }
	both(Command{Op: OpAcquire, RequestID: "x", Now: 1, Key: "k", Holder: "x", TTL: 100})
	for i, h := range []string{"h1", "h2", "h3"} {
		if r, _ := both(Command{Op: OpWait, RequestID: "id-" + h, Now: locktable.Time(2 + i), Key: "k", Holder: h, TTL: 50, Deadline: 1000}); !r.Queued {
			t.Fatalf("%s: %+v", h, r)
		}
	}
	// h1 re-sends while queued: same place, not a duplicate answer.
	if r, _ := both(Command{Op: OpWait, RequestID: "id-h1", Now: 6, Key: "k", Holder: "h1", TTL: 50, Deadline: 1000}); !r.Queued || r.Duplicate {
		t.Fatalf("re-sent queued wait: %+v", r)
	}
	if got := a.f.Waiters("k"); len(got) != 3 || got[0] != "h1" || got[1] != "h2" {
		t.Fatalf("queue after a re-send: %v", got)
	}
	// b restarts from a snapshot here.
	snap, _ := b.f.MarshalBinary()
	b.f = New(nil)
	if err := b.f.UnmarshalBinary(snap); err != nil {
		t.Fatal(err)
	}
	rel, _ := both(Command{Op: OpRelease, RequestID: "rx", Now: 7, Key: "k", Holder: "x", Token: 1})
	if !rel.Released {
		t.Fatalf("release: %+v", rel)
	}
	grant, ok := a.f.Get("k", 7)
	if !ok || grant.Holder != "h1" || grant.Token != 2 {
		t.Fatalf("hand-off: %+v %v", grant, ok)
	}
	last := a.f.LastToken()
	ra, rb := both(Command{Op: OpWait, RequestID: "id-h1", Now: 8, Key: "k", Holder: "h1", TTL: 50, Deadline: 1000})
	for _, r := range []*Result{ra, rb} {
		if !r.Duplicate || !r.Granted || r.Lease.Token != 2 || r.Lease.Holder != "h1" {
			t.Fatalf("re-sent wait after its hand-off: %+v; want the grant with token 2", r)
		}
	}
	if a.f.LastToken() != last || b.f.LastToken() != last {
		t.Fatal("the re-sent wait issued a token")
	}
	// The grant was claimed: a release of it by the wait's id is refused.
	if r, _ := both(Command{Op: OpRelease, RequestID: "id-h1", Now: 9, Key: "k", Holder: "h1", Token: 2}); r.Released {
		t.Fatalf("release of a claimed grant: %+v", r)
	}
	if l, ok := a.f.Get("k", 9); !ok || l.Token != 2 {
		t.Fatalf("after the refused release: %+v %v", l, ok)
	}
	// h2's grant, never claimed, is released by its wait's id.
	both(Command{Op: OpRelease, RequestID: "r-h1", Now: 10, Key: "k", Holder: "h1", Token: 2})
	if l, ok := a.f.Get("k", 10); !ok || l.Holder != "h2" || l.Token != 3 {
		t.Fatalf("second hand-off: %+v %v", l, ok)
	}
	if r, _ := both(Command{Op: OpRelease, RequestID: "id-h2", Now: 11, Key: "k", Holder: "h2", Token: 3}); !r.Released {
		t.Fatalf("release of an unclaimed grant: %+v", r)
	}
	// h2 comes back after its grant was released: it waits anew.
	if r, _ := both(Command{Op: OpWait, RequestID: "id-h2", Now: 12, Key: "k", Holder: "h2", TTL: 50, Deadline: 1000}); r.Duplicate || !r.Queued {
		t.Fatalf("re-sent wait after its grant ended: %+v", r)
	}
	sa, _ := a.f.MarshalBinary()
	sb, _ := b.f.MarshalBinary()
	if !bytes.Equal(sa, sb) {
		t.Fatal("the replica restored from a snapshot diverged")
	}
}

func TestRememberedRequestsAreForgottenDeterministically(t *testing.T) {
	a, _ := newApplier(t)
	a.do(Command{Op: OpAcquire, RequestID: "old", Now: 1, Key: "k", Holder: "h", TTL: 100})
	// Past the window of cluster time the id is forgotten.
	a.do(Command{Op: OpTick, Now: 1 + locktable.Time(RememberFor)})
	if r := a.do(Command{Op: OpAcquire, RequestID: "old", Now: 2 + locktable.Time(RememberFor), Key: "k", Holder: "h", TTL: 100}); r.Duplicate {
		t.Fatal("remembered past the window")
	}
	// Past the count, the oldest go first.
	b, _ := newApplier(t)
	for i := range RememberCount + 1 {
		b.do(Command{Op: OpExtend, RequestID: string(rune('a'+i%26)) + string(rune(i)), Now: 1, Key: "k", Holder: "h", Token: 1, TTL: 10})
	}
	if b.f.mem.Len() != RememberCount || len(b.f.mem.seen) != RememberCount {
		t.Fatalf("remembers %d/%d, want %d", b.f.mem.Len(), len(b.f.mem.seen), RememberCount)
	}
}

func TestRememberedRequestsSurviveSnapshot(t *testing.T) {
	a, _ := newApplier(t)
	a.do(Command{Op: OpAcquire, RequestID: "a1", Now: 1, Key: "a", Holder: "h", TTL: 100})
	a.do(Command{Op: OpAcquire, RequestID: "b1", Now: 1, Key: "b", Holder: "h", TTL: 100})
	a.do(Command{Op: OpAcquire, RequestID: "x1", Now: 2, Key: "a", Holder: "x", TTL: 100}) // held
	a.do(Command{Op: OpExtend, RequestID: "e1", Now: 3, Key: "a", Holder: "h", Token: 1, TTL: 50})
	a.do(Command{Op: OpRelease, RequestID: "r1", Now: 4, Key: "b", Holder: "h"})
	data, _ := a.f.MarshalBinary()

	b, _ := newApplier(t)
	if err := b.f.Restore(bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	again, _ := b.f.MarshalBinary()
	if !bytes.Equal(again, data) {
		t.Fatal("restored memory encodes differently")
	}
	b.index = 100
	for _, c := range []Command{
		{Op: OpAcquire, RequestID: "a1", Now: 5, Key: "a", Holder: "h", TTL: 100},
		{Op: OpAcquire, RequestID: "x1", Now: 5, Key: "a", Holder: "x", TTL: 100},
		{Op: OpExtend, RequestID: "e1", Now: 5, Key: "a", Holder: "h", Token: 1, TTL: 50},
		{Op: OpRelease, RequestID: "r1", Now: 5, Key: "b", Holder: "h"},
	} {
		want := a.do(c)
		got := b.do(c)
		if !got.Duplicate || !want.Duplicate || got.Lease != want.Lease || got.Granted != want.Granted ||
			got.Released != want.Released || len(got.Batch) != len(want.Batch) || (got.Err == nil) != (want.Err == nil) {
			t.Fatalf("%s after restore: %+v, before: %+v", c.Op, got, want)
		}
		for i := range got.Batch {
			if got.Batch[i].Lease != want.Batch[i].Lease || (got.Batch[i].Err == nil) != (want.Batch[i].Err == nil) {
				t.Fatalf("batch item %d: %+v vs %+v", i, got.Batch[i], want.Batch[i])
			}
		}
	}
	if b.f.LastToken() != 2 {
		t.Fatalf("replayed retries issued tokens: last %d", b.f.LastToken())
	}
}

// An id reused on another key is a new request: remembering by (holder, id)
// alone would answer an acquire or extend of key b with key a's lease.
func TestSameIDOnAnotherKeyIsNewRequest(t *testing.T) {
	a, _ := newApplier(t)
	first := a.do(Command{Op: OpAcquire, RequestID: "1", Now: 1, Key: "a", Holder: "h", TTL: 100})
	second := a.do(Command{Op: OpAcquire, RequestID: "1", Now: 2, Key: "b", Holder: "h", TTL: 100})
	if second.Duplicate || second.Lease.Key != "b" || second.Lease.Token == first.Lease.Token {
		t.Fatalf("acquire of b answered as a retry: %+v", second)
	}
	a.do(Command{Op: OpExtend, RequestID: "e", Now: 3, Key: "a", Holder: "h", Token: first.Lease.Token, TTL: 100})
	r := a.do(Command{Op: OpExtend, RequestID: "e", Now: 4, Key: "b", Holder: "h", Token: 7, TTL: 100})
	if r.Duplicate || r.Err == nil {
		t.Fatalf("extend of b with a stale token answered from a's extend: %+v", r)
	}
}

// Batches are not remembered: their results can be a thousand leases.
func TestExtendBatchNotRemembered(t *testing.T) {
	a, _ := newApplier(t)
	a.do(Command{Op: OpAcquire, Now: 1, Key: "a", Holder: "h", TTL: 100})
	for i := 0; i < 2; i++ {
		if r := a.do(Command{Op: OpExtendBatch, RequestID: "b1", Now: locktable.Time(2 + i), Holder: "h", TTL: 50, Items: []Item{{Key: "a", Token: 1}}}); r.Duplicate {
			t.Fatal("extend batch answered from memory")
		}
	}
	if a.f.mem.Len() != 0 {
		t.Fatalf("remembers %d entries", a.f.mem.Len())
	}
}

// A multi-key acquire re-sent, or delivered twice by the network, after
// its holder released one of the keys is answered with the first grant:
// the released key stays free and the other keeps its token. Running it
// again took the released key back and moved the other to a new token
// behind its holder (found by internal/sim, seed 39: a duplicating link).
func TestAcquireKeysRememberedAcrossAPartialRelease(t *testing.T) {
	a, _ := newApplier(t)
	c := Command{Op: OpAcquireKeys, RequestID: "m1", Now: 1, Holder: "h", TTL: 100, Items: []Item{{Key: "a"}, {Key: "b"}}}
	first := a.do(c)
	if first.Err != nil || len(first.Leases) != 2 {
		t.Fatalf("acquire-all: %+v", first)
	}
	if r := a.do(Command{Op: OpRelease, Now: 2, Key: "a", Holder: "h", Token: first.Leases[0].Token}); !r.Released {
		t.Fatalf("release a: %+v", r)
	}
	last := a.f.LastToken()
	check := func(f *FSM, label string, r *Result) {
		t.Helper()
		if !r.Duplicate || !r.Granted || len(r.Leases) != 2 || r.Leases[0] != first.Leases[0] || r.Leases[1] != first.Leases[1] || r.Batch != nil {
			t.Fatalf("%s: %+v, want the first grant %+v", label, r, first.Leases)
		}
		if _, live := f.table.LeaseOf("a", "h", 3); live {
			t.Fatalf("%s: the released key was taken again", label)
		}
		if l, live := f.table.LeaseOf("b", "h", 3); !live || l.Token != first.Leases[1].Token {
			t.Fatalf("%s: b is %+v (live %v), want token %d", label, l, live, first.Leases[1].Token)
		}
		if f.LastToken() != last {
			t.Fatalf("%s: tokens issued, last %d", label, f.LastToken())
		}
	}
	c.Now = 3
	again := a.do(c)
	check(a.f, "the copy", again)

	data, _ := a.f.MarshalBinary()
	b, _ := newApplier(t)
	if err := b.f.Restore(bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	b.index = 100
	restored := b.do(c)
	check(b.f, "after a snapshot", restored)

	// A refused acquire-all is not remembered: asked again once the key
	// is free, it is granted.
	a.do(Command{Op: OpAcquire, Now: 4, Key: "x", Holder: "o", TTL: 100})
	refused := Command{Op: OpAcquireKeys, RequestID: "m2", Now: 4, Holder: "h", TTL: 100, Items: []Item{{Key: "x"}, {Key: "y"}}}
	if r := a.do(refused); r.Err == nil {
		t.Fatalf("acquire-all over a held key: %+v", r)
	}
	a.do(Command{Op: OpRelease, Now: 5, Key: "x", Holder: "o"})
	refused.Now = 5
	if r := a.do(refused); r.Err != nil || r.Duplicate {
		t.Fatalf("asked again: %+v", r)
	}
}
