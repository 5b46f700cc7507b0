package locktable

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"pgregory.net/rapid"
)

// TestWaitLimitPerKey: with a cap of 3 waiters per key, the 4th holder to
// queue on a key is refused with ErrTooManyWaiters and the table does not
// change; a queued holder re-sending its wait keeps its place; another key
// still queues; and once a waiter leaves, a newcomer gets in.
func TestWaitLimitPerKey(t *testing.T) {
	tb := New()
	lim := WaitLimits{PerKey: 3}
	if _, err := tb.Acquire("k", "owner", 0, 10*Second); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, granted, err := tb.WaitWithin("k", fmt.Sprintf("w%d", i), 0, Second, NoDeadline, lim); err != nil || granted {
			t.Fatalf("waiter %d: granted %v, err %v", i, granted, err)
		}
	}
	before, _ := tb.MarshalBinary()
	_, granted, err := tb.WaitWithin("k", "w3", 0, Second, NoDeadline, lim)
	var full *QueueFullError
	if !errors.Is(err, ErrTooManyWaiters) || !errors.As(err, &full) || full.Scope != "key" || full.Limit != 3 || granted {
		t.Fatalf("4th waiter: granted %v, err %v; want a per-key ErrTooManyWaiters", granted, err)
	}
	if after, _ := tb.MarshalBinary(); !bytes.Equal(before, after) {
		t.Fatal("the refused wait changed the table")
	}
	if got := tb.Waiters("k"); len(got) != 3 || tb.QueuedCount() != 3 {
		t.Fatalf("waiters %v, count %d", got, tb.QueuedCount())
	}
	if _, _, err := tb.WaitWithin("k", "w1", 1, 2*Second, NoDeadline, lim); err != nil {
		t.Fatalf("a queued holder re-sending its wait: %v", err)
	}
	if _, err := tb.Acquire("other", "owner", 0, 10*Second); err != nil {
		t.Fatal(err)
	}
	if _, _, err := tb.WaitWithin("other", "w3", 1, Second, NoDeadline, lim); err != nil {
		t.Fatalf("another key: %v", err)
	}
	tb.CancelWait("k", "w0")
	if _, _, err := tb.WaitWithin("k", "w3", 1, Second, NoDeadline, lim); err != nil {
		t.Fatalf("after a waiter left: %v", err)
	}
}

// TestWaitLimitTotal: the cap on all queues counts every key's waiters.
func TestWaitLimitTotal(t *testing.T) {
	tb := New()
	lim := WaitLimits{PerKey: 10, Total: 4}
	for i := range 4 {
		key := fmt.Sprintf("k%d", i%2)
		if _, err := tb.Acquire(key, "owner", 0, 10*Second); err != nil {
			t.Fatal(err)
		}
		if _, _, err := tb.WaitWithin(key, fmt.Sprintf("w%d", i), 0, Second, NoDeadline, lim); err != nil {
			t.Fatalf("waiter %d: %v", i, err)
		}
	}
	before, _ := tb.MarshalBinary()
	_, _, err := tb.WaitWithin("k0", "w9", 0, Second, NoDeadline, lim)
	var full *QueueFullError
	if !errors.As(err, &full) || full.Scope != "total" || full.Limit != 4 {
		t.Fatalf("5th waiter: %v; want a total ErrTooManyWaiters", err)
	}
	if after, _ := tb.MarshalBinary(); !bytes.Equal(before, after) {
		t.Fatal("the refused wait changed the table")
	}
	// Free keys are granted at once: no queue, no limit.
	if _, granted, err := tb.WaitWithin("free", "w9", 0, Second, NoDeadline, lim); err != nil || !granted {
		t.Fatalf("a free key: granted %v, err %v", granted, err)
	}
}

// TestQueuedCount: the count of waiters stays the sum of the queues
// through grants from the queue, deadlines, cancels and snapshots, and no
// queue ever exceeds the limits.
func TestQueuedCount(t *testing.T) {
	keys := []string{"a", "b", "c"}
	holders := []string{"h1", "h2", "h3", "h4", "h5"}
	rapid.Check(t, func(rt *rapid.T) {
		tb := New()
		lim := WaitLimits{PerKey: rapid.IntRange(0, 3).Draw(rt, "perKey"), Total: rapid.IntRange(0, 6).Draw(rt, "total")}
		now := Time(0)
		for range rapid.IntRange(0, 80).Draw(rt, "ops") {
			now += Time(rapid.IntRange(0, 2).Draw(rt, "step")) * Time(Second)
			key, holder := rapid.SampledFrom(keys).Draw(rt, "key"), rapid.SampledFrom(holders).Draw(rt, "holder")
			ttl := Duration(rapid.IntRange(1, 4).Draw(rt, "ttl")) * Second
			switch rapid.IntRange(0, 5).Draw(rt, "op") {
			case 0:
				_, _ = tb.Acquire(key, holder, now, ttl)
			case 1, 2:
				_, _, _ = tb.WaitWithin(key, holder, now, ttl, now+Time(rapid.IntRange(0, 5).Draw(rt, "wait"))*Time(Second), lim)
			case 3:
				_, _ = tb.Release(key, holder, now)
			case 4:
				tb.CancelWait(key, holder)
				tb.Tick(now)
			case 5:
				b, _ := tb.MarshalBinary()
				back := New()
				if err := back.UnmarshalBinary(b); err != nil {
					rt.Fatal(err)
				}
				tb = back
			}
			sum := 0
			for _, q := range tb.waiting {
				if lim.PerKey > 0 && len(q.waiters) > lim.PerKey {
					rt.Fatalf("a queue of %d, limit %d", len(q.waiters), lim.PerKey)
				}
				sum += len(q.waiters)
			}
			if sum != tb.QueuedCount() || (lim.Total > 0 && sum > lim.Total) {
				rt.Fatalf("QueuedCount %d, the queues hold %d, limit %d", tb.QueuedCount(), sum, lim.Total)
			}
		}
	})
}

// TestWaitLimitPerKeyOwner (issue 41, item 4): one owner's holders
// ("mallory/1", "mallory/2", …) could take a key's whole queue, and
// everybody else was refused there. With a share per owner, mallory's
// next holder is refused (scope "owner", the table unchanged) while
// others still queue, on a plain key and on a semaphore alike; a
// mallory holder already queued keeps its place.
func TestWaitLimitPerKeyOwner(t *testing.T) {
	lim := WaitLimits{PerKey: 10, PerKeyOwner: 3}
	for _, kind := range []string{"exclusive", "semaphore"} {
		tb := New()
		wait := func(holder string) error {
			if kind == "exclusive" {
				_, _, err := tb.WaitWithin("k", holder, 0, Second, NoDeadline, lim)
				return err
			}
			_, _, err := tb.AcquireShared("k", holder, Shared{Kind: Semaphore, Permits: 1}, 0, Second, NoDeadline, lim)
			return err
		}
		if err := wait("owner"); err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			if err := wait(fmt.Sprintf("mallory/%d", i)); err != nil {
				t.Fatalf("%s: mallory/%d: %v", kind, i, err)
			}
		}
		before, _ := tb.MarshalBinary()
		err := wait("mallory/3")
		var full *QueueFullError
		if !errors.Is(err, ErrTooManyWaiters) || !errors.As(err, &full) || full.Scope != "owner" || full.Owner != "mallory" || full.Limit != 3 {
			t.Fatalf("%s: mallory's 4th holder: %v; want its share refused", kind, err)
		}
		if after, _ := tb.MarshalBinary(); !bytes.Equal(before, after) {
			t.Fatalf("%s: the refused wait changed the table", kind)
		}
		if err := wait("mallory"); err == nil {
			t.Fatalf("%s: the owner's own name got past its share", kind)
		}
		if err := wait("mallory/1"); err != nil {
			t.Fatalf("%s: a queued holder of mallory re-sending its wait: %v", kind, err)
		}
		for _, h := range []string{"alice", "alice/1", "bob"} {
			if err := wait(h); err != nil {
				t.Fatalf("%s: %s, another owner: %v", kind, h, err)
			}
		}
		if tb.QueuedCount() != 6 {
			t.Fatalf("%s: %d queued, want 6", kind, tb.QueuedCount())
		}
	}
}
