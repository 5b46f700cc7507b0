package service

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/fencelock/fencelock/api"
)

// A release hands the key to the head waiter only, in the same committed
// step, with the next token; the others stay queued in order. Each
// release after it hands to the next: one wake-up per hand-off.
func TestHandOffIsFIFOOnePerRelease(t *testing.T) {
	s, _, _ := newTestService(t)
	ctx := context.Background()
	held := mustAcquire(t, s, api.AcquireRequest{Key: "q", Holder: "h0", TTLMs: 60000})
	const n = 4
	var waits []<-chan leaseAnswer
	var holders []string
	for i := 1; i <= n; i++ {
		h := fmt.Sprintf("h%d", i)
		holders = append(holders, h)
		waits = append(waits, queueWaiter(t, ctx, s, api.AcquireRequest{Key: "q", Holder: h, TTLMs: 60000, WaitMs: 60000}, i))
	}
	if got := s.Waiters("q"); !slices.Equal(got, holders) {
		t.Fatalf("queue %v, want arrival order %v", got, holders)
	}
	prev := api.Lease{Holder: "h0", Token: held.Token}
	for i := range n {
		if r, err := s.Release(ctx, api.ReleaseRequest{Key: "q", Holder: prev.Holder, Token: prev.Token}); err != nil || !r.Released {
			t.Fatalf("release by %s: %+v %v", prev.Holder, r, err)
		}
		// The hand-off is committed with the release: the table says who
		// has the key before any waiter is told.
		if h := holderOf(s, "q"); h != holders[i] {
			t.Fatalf("hand-off %d went to %q, want the head %s", i+1, h, holders[i])
		}
		if got := s.Waiters("q"); !slices.Equal(got, holders[i+1:]) {
			t.Fatalf("after hand-off %d the queue is %v, want %v", i+1, got, holders[i+1:])
		}
		a := await(t, holders[i], waits[i])
		if a.err != nil || a.l.Holder != holders[i] || a.l.Key != "q" || a.l.Token != prev.Token+1 || a.l.TTLMs != 60000 {
			t.Fatalf("%s answered %+v %v; want the grant with token %d", holders[i], a.l, a.err, prev.Token+1)
		}
		for j := i + 1; j < n; j++ {
			notYet(t, holders[j], waits[j])
		}
		prev = a.l
	}
}

// A waiter whose wait runs out on the fake clock leaves the queue through
// the leader's tick and is answered held, naming the holder and what is
// left of its lease.
func TestWaitElapsedAnswersHeldNamingTheHolder(t *testing.T) {
	s, _, fake := newTestService(t)
	ctx := context.Background()
	mustAcquire(t, s, api.AcquireRequest{Key: "k", Holder: "a", TTLMs: 60000})
	w := queueWaiter(t, ctx, s, api.AcquireRequest{Key: "k", Holder: "b", TTLMs: 1000, WaitMs: 2000}, 1)
	fake.Advance(1999 * time.Millisecond)
	notYet(t, "b before its wait ran out", w)
	if got := s.Waiters("k"); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("queue %v before the deadline", got)
	}
	fake.Advance(time.Millisecond)
	a := await(t, "b", w)
	e := wantCode(t, a.err, api.CodeHeld)
	if e.Holder != "a" || e.RemainingMs == nil || *e.RemainingMs != 58000 {
		t.Fatalf("held answer names %q with %v ms left; want a with 58000", e.Holder, e.RemainingMs)
	}
	if got := s.Waiters("k"); len(got) != 0 {
		t.Fatalf("b still queued: %v", got)
	}
	if h := holderOf(s, "k"); h != "a" {
		t.Fatalf("holder %q after b's wait ran out", h)
	}
}

// A waiter in the middle of the queue whose caller goes away leaves it;
// the hand-offs skip it and keep the others' order.
func TestCancelledWaiterLeavesTheMiddleOfTheQueue(t *testing.T) {
	s, _, _ := newTestService(t)
	ctx := context.Background()
	mustAcquire(t, s, api.AcquireRequest{Key: "k", Holder: "a", TTLMs: 60000})
	w1 := queueWaiter(t, ctx, s, api.AcquireRequest{Key: "k", Holder: "w1", TTLMs: 60000, WaitMs: 60000}, 1)
	ctx2, cancel2 := context.WithCancel(ctx)
	defer cancel2()
	w2 := queueWaiter(t, ctx2, s, api.AcquireRequest{Key: "k", Holder: "w2", TTLMs: 60000, WaitMs: 60000}, 2)
	w3 := queueWaiter(t, ctx, s, api.AcquireRequest{Key: "k", Holder: "w3", TTLMs: 60000, WaitMs: 60000}, 3)
	cancel2()
	a2 := await(t, "w2", w2)
	wantCode(t, a2.err, api.CodeUnavailable)
	if got := s.Waiters("k"); !slices.Equal(got, []string{"w1", "w3"}) {
		t.Fatalf("queue %v after w2 left, want [w1 w3]", got)
	}
	s.Release(ctx, api.ReleaseRequest{Key: "k", Holder: "a"})
	a1 := await(t, "w1", w1)
	if a1.err != nil || a1.l.Holder != "w1" {
		t.Fatalf("w1: %+v %v", a1.l, a1.err)
	}
	s.Release(ctx, api.ReleaseRequest{Key: "k", Holder: "w1"})
	a3 := await(t, "w3", w3)
	if a3.err != nil || a3.l.Holder != "w3" || a3.l.Token != a1.l.Token+1 {
		t.Fatalf("w3: %+v %v; want the grant after w1's", a3.l, a3.err)
	}
}

// The per-key queue cap refuses one more waiter with too_many_waiters at
// once, changing nothing; another key's queue is not affected, and once
// a place is free the key takes a waiter again.
func TestTooManyWaitersAtThePerKeyCap(t *testing.T) {
	s, _, _ := newTestServiceWith(t, func(c *Config) { c.MaxWaitersPerKey = 2 })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	mustAcquire(t, s, api.AcquireRequest{Key: "k", Holder: "a", TTLMs: 60000})
	w1 := queueWaiter(t, ctx, s, api.AcquireRequest{Key: "k", Holder: "w1", TTLMs: 1000, WaitMs: 60000}, 1)
	queueWaiter(t, ctx, s, api.AcquireRequest{Key: "k", Holder: "w2", TTLMs: 1000, WaitMs: 60000}, 2)
	_, err := refusedWait(t, ctx, s, api.AcquireRequest{Key: "k", Holder: "w3", TTLMs: 1000, WaitMs: 60000}, 2)
	wantCode(t, err, api.CodeTooManyWaiters)
	if got := s.Waiters("k"); !slices.Equal(got, []string{"w1", "w2"}) {
		t.Fatalf("queue %v after the refusal, want [w1 w2]", got)
	}
	// A request that does not wait is answered as usual.
	_, err = s.Acquire(ctx, "", api.AcquireRequest{Key: "k", Holder: "w3", TTLMs: 1000})
	wantCode(t, err, api.CodeHeld)
	// The cap is per key.
	mustAcquire(t, s, api.AcquireRequest{Key: "other", Holder: "a", TTLMs: 60000})
	queueWaiter(t, ctx, s, api.AcquireRequest{Key: "other", Holder: "w3", TTLMs: 1000, WaitMs: 60000}, 1)
	// w1 is handed the key: its place is free for w3.
	s.Release(ctx, api.ReleaseRequest{Key: "k", Holder: "a"})
	if a := await(t, "w1", w1); a.err != nil {
		t.Fatal(a.err)
	}
	queueWaiter(t, ctx, s, api.AcquireRequest{Key: "k", Holder: "w3", TTLMs: 1000, WaitMs: 60000}, 2)
	// cancel, then the Cleanup's Close, end the waiters left.
}

// A lease that runs out is expired by the leader's tick on the fake clock
// and its key handed to the head waiter in the same step.
func TestExpiryByTheLeadersTickHandsToTheWaiter(t *testing.T) {
	s, _, fake := newTestService(t)
	ctx := context.Background()
	a := mustAcquire(t, s, api.AcquireRequest{Key: "k", Holder: "a", TTLMs: 1000})
	b := queueWaiter(t, ctx, s, api.AcquireRequest{Key: "k", Holder: "b", TTLMs: 5000, WaitMs: 60000}, 1)
	fake.Advance(999 * time.Millisecond)
	notYet(t, "b before a's expiry", b)
	fake.Advance(time.Millisecond)
	got := await(t, "b", b)
	if got.err != nil || got.l.Holder != "b" || got.l.Token != a.Token+1 || got.l.RemainingMs != 5000 {
		t.Fatalf("b: %+v %v; want token %d with its full ttl", got.l, got.err, a.Token+1)
	}
	if c, _ := s.Check(ctx, "k", a.Token); c.Valid {
		t.Fatal("a's token is still valid after the hand-off")
	}
	// With nobody waiting, the tick expires the lease and frees the key.
	fake.Advance(5 * time.Second)
	eventually(t, "b's lease expired by a tick", func() bool { _, due := s.fsm.NextDeadline(); return !due })
	if l, ok := s.fsm.Get("k", s.fsm.Now()); ok {
		t.Fatalf("the tick left %+v in the table", l)
	}
}

// A lease with a lock-delay that expires keeps its key granted to nobody,
// waiters included, for the delay after its end; the waiter at the head
// is handed the key when the delay ends. A release starts no delay.
func TestLockDelayAfterExpiryNotAfterRelease(t *testing.T) {
	s, _, fake := newTestService(t)
	ctx := context.Background()
	mustAcquire(t, s, api.AcquireRequest{Key: "k", Holder: "a", TTLMs: 1000, LockDelayMs: 3000})
	fake.Advance(time.Second)
	_, err := s.Acquire(ctx, "", api.AcquireRequest{Key: "k", Holder: "b", TTLMs: 1000})
	if e := wantCode(t, err, api.CodeLockDelay); e.RemainingMs == nil || *e.RemainingMs != 3000 {
		t.Fatalf("lock_delay answer says %v ms left, want 3000", e.RemainingMs)
	}
	c := queueWaiter(t, ctx, s, api.AcquireRequest{Key: "k", Holder: "c", TTLMs: 1000, WaitMs: 60000}, 1)
	fake.Advance(2999 * time.Millisecond)
	notYet(t, "c during the lock-delay", c)
	if h := holderOf(s, "k"); h != "" {
		t.Fatalf("%q holds the key during its lock-delay", h)
	}
	fake.Advance(time.Millisecond)
	if got := await(t, "c", c); got.err != nil || got.l.Holder != "c" {
		t.Fatalf("c at the end of the lock-delay: %+v %v", got.l, got.err)
	}

	l := mustAcquire(t, s, api.AcquireRequest{Key: "r", Holder: "a", TTLMs: 1000, LockDelayMs: 3000})
	if r, err := s.Release(ctx, api.ReleaseRequest{Key: "r", Holder: "a", Token: l.Token}); err != nil || !r.Released {
		t.Fatalf("release: %+v %v", r, err)
	}
	mustAcquire(t, s, api.AcquireRequest{Key: "r", Holder: "b", TTLMs: 1000})
}
