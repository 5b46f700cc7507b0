package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/client/clienttest"
)

// TestAcquireNeverHandsOverALeaseWithoutItsFailoverAllowance (issue 44):
// a grant that comes back late is re-dated by an extension before
// Acquire returns it; when that extension is itself held up on a frozen
// node and confirmed by the next one, it can only be dated from its first
// send, long ago. Acquire then extends again rather than hand over a
// lease that a failover right away would lose: before, it returned one
// with 0.17 s left of a 3 s TTL (the issue saw 0.1 s).
func TestAcquireNeverHandsOverALeaseWithoutItsFailoverAllowance(t *testing.T) {
	leakCheck(t)
	const check = 1250 * time.Millisecond // above every(3s), 1.17s; two of them below giveUp(3s), 2.67s
	every := everyOf(ttl)
	clk := newFakeClock()
	a, b := clienttest.NewServer(clk), clienttest.NewServer(clk)
	c, err := client.New([]string{a.Addr, b.Addr}, client.WithClock(clk), client.WithWaitCheck(check))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); a.Close(); b.Close() })
	// b knows the grant, as the replica the cluster elects next does.
	cb, err := client.New([]string{b.Addr}, client.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cb.Close)
	if _, err := cb.Grant(context.Background(), "k", "h", time.Hour, 0); err != nil {
		t.Fatal(err)
	}
	// a answers the grant only after every (a slow leader), then freezes
	// before the extension that re-dates it.
	a.Delay("acquire", every)
	freeze(a, "extend")
	type result struct {
		l   *client.Lease
		err error
	}
	got := make(chan result, 1)
	go func() {
		l, err := c.TryAcquire(context.Background(), "k", client.WithTTL(ttl), client.WithHolder("h"))
		got <- result{l, err}
	}()
	waitFor(t, "the grant to wait on a", func() bool { return a.Count("acquire") == 1 && clk.Pending() == 2 })
	clk.Advance(every)
	stepPastSilence(t, clk, a, "extend", check)
	var r result
	select {
	case r = <-got:
	case <-time.After(10 * time.Second): // a bound on a hang, not a timing
		t.Fatal("Acquire never returned")
	}
	var lost *client.LostError
	switch {
	case errors.As(r.err, &lost):
		return // reported lost: allowed, though here b answers at once
	case r.err != nil:
		t.Fatal(r.err)
	}
	defer r.l.Release(context.Background())
	if left := r.l.Deadline().Sub(clk.Now()); left < client.FailoverAllowance {
		t.Fatalf("Acquire handed over a lease with %v left before its give-up point; want at least the failover allowance, %v", left, client.FailoverAllowance)
	}
	if n := b.Count("extend"); n != 2 {
		t.Errorf("b got %d extensions; want the one left by a and the one that re-dated it", n)
	}
}
