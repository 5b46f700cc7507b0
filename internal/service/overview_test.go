package service

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/api"
)

// queues is every listed queue of an overview as "key:holder,holder",
// leases' first, then the keys in their lock-delay ("key(delay Nms):").
func queues(o api.Overview) string {
	var out []string
	for _, l := range o.Locks {
		var hs []string
		for _, w := range l.Waiters {
			hs = append(hs, w.Holder)
		}
		out = append(out, l.Key+":"+strings.Join(hs, ","))
	}
	for _, d := range o.Delayed {
		var hs []string
		for _, w := range d.Waiters {
			hs = append(hs, w.Holder)
		}
		out = append(out, fmt.Sprintf("%s(delay %dms, %d waiting):%s", d.Key, d.RemainingMs, d.WaitersTotal, strings.Join(hs, ",")))
	}
	return strings.Join(out, " ")
}

// TestOverviewListsWaitersHeldBackByLockDelay (issue 44.1): a waiter on a
// key in its lock-delay (its lease expired, and nobody may have it until
// the delay ends) was counted in the overview's queued but listed
// nowhere, since only keys with a live lease were: the dashboard said
// "2 queued in all, 1 listed below". Now the keys in their lock-delay
// are listed with their queues (waiters queued before the expiry and
// after it) and how long the delay has left, and the listed waiters add
// up to queued again; once the delay ends the head is granted and the
// key is a lease again.
func TestOverviewListsWaitersHeldBackByLockDelay(t *testing.T) {
	s, _, fake := newTestService(t)
	ctx := context.Background()
	mustAcquire(t, s, api.AcquireRequest{Key: "jobs/a", Holder: "a", TTLMs: 1000, LockDelayMs: 3000})
	mustAcquire(t, s, api.AcquireRequest{Key: "jobs/x", Holder: "x", TTLMs: 60000})
	b := queueWaiter(t, ctx, s, api.AcquireRequest{Key: "jobs/a", Holder: "b", TTLMs: 1000, WaitMs: 60000}, 1)
	queueWaiter(t, ctx, s, api.AcquireRequest{Key: "jobs/x", Holder: "y", TTLMs: 1000, WaitMs: 60000}, 1)
	fake.Advance(time.Second) // a's lease expires: jobs/a is in its lock-delay
	c := queueWaiter(t, ctx, s, api.AcquireRequest{Key: "jobs/a", Holder: "c", TTLMs: 1000, WaitMs: 60000}, 2)
	notYet(t, "b during the lock-delay", b)

	o, err := s.Overview(ctx, "jobs/", 0)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := queues(o), "jobs/x:y jobs/a(delay 3000ms, 2 waiting):b,c"; got != want || o.Queued != 3 || o.DelayedMore {
		t.Fatalf("overview: %s, %d queued (cut %v); want %s, 3 queued", got, o.Queued, o.DelayedMore, want)
	}
	if o, err := s.Overview(ctx, "other/", 0); err != nil || len(o.Delayed) != 0 {
		t.Fatalf("overview under another prefix: %+v %v", o.Delayed, err)
	}

	fake.Advance(3 * time.Second) // the delay ends: b is granted
	if got := await(t, "b", b); got.err != nil || got.l.Holder != "b" {
		t.Fatalf("b at the end of the lock-delay: %+v %v", got.l, got.err)
	}
	o, err = s.Overview(ctx, "jobs/", 0)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := queues(o), "jobs/a:c jobs/x:y"; got != want || o.Queued != 2 {
		t.Fatalf("after the delay: %s, %d queued; want %s, 2", got, o.Queued, want)
	}
	_ = c
}
