package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/clock"
)

// waitFor polls cond until it holds. It decides nothing by time: the bound
// only turns a hang into a failure.
// newFakeClock is a clock.Fake standing at an arbitrary fixed instant.
func newFakeClock() *clock.Fake {
	return clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// leakCheck verifies, after every other cleanup of t (servers, clients),
// that no goroutine outlives the test.
func leakCheck(t *testing.T) {
	t.Helper()
	t.Cleanup(func() { goleak.VerifyNone(t) })
}

func isDone(l *client.Lease) bool {
	select {
	case <-l.Done():
		return true
	default:
		return false
	}
}

const ttl = 3 * time.Second

func TestLeaseExtendCadence(t *testing.T) {
	leakCheck(t)
	clk := newFakeClock()
	srv, c := newPair(t, clk)
	l, err := c.TryAcquire(context.Background(), "k", client.WithTTL(ttl), client.WithHolder("a"))
	if err != nil {
		t.Fatal(err)
	}
	if l.Token() != 1 || l.Holder() != "a" || l.Key() != "k" || l.TTL() != ttl {
		t.Fatalf("lease = %d %q %q %v", l.Token(), l.Holder(), l.Key(), l.TTL())
	}
	lastSent := clk.Now()
	// Pending timers at rest: the lease's deadline and the keep-alive's
	// sleep (the server's own timers are not counted).
	waitFor(t, "the keep-alive to sleep", func() bool { return clk.Pending() == 2 })
	for i := 1; i <= 5; i++ {
		if got := l.Deadline(); !got.Equal(lastSent.Add(giveUpOf(ttl))) {
			t.Fatalf("cycle %d: deadline %v after the last send, want %v", i, got.Sub(lastSent), giveUpOf(ttl))
		}
		next, _ := clk.Next()
		since := clk.Now().Add(next).Sub(lastSent)
		if every := everyOf(ttl); since < every-every/10 || since > every {
			t.Fatalf("cycle %d: next extension %v after the last confirmed send, want %v less up to 10%%", i, since, every)
		}
		if n := srv.Count("extend"); n != i-1 {
			t.Fatalf("cycle %d: %d extensions before the due time", i, n)
		}
		clk.Advance(next)
		lastSent = clk.Now()
		waitFor(t, "the extension", func() bool { return srv.Count("extend") == i })
		waitFor(t, "the confirmation", func() bool { return l.Deadline().Equal(lastSent.Add(giveUpOf(ttl))) })
		waitFor(t, "the keep-alive to sleep", func() bool { return clk.Pending() == 2 })
	}
	if h, tok, ok := srv.Holder("k"); !ok || h != "a" || tok != 1 {
		t.Fatalf("server: %q %d %v; the extensions must keep token 1", h, tok, ok)
	}
	if err := l.Err(); err != nil {
		t.Fatalf("Err = %v while extending", err)
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !isDone(l) || !errors.Is(l.Err(), client.ErrReleased) || !errors.Is(context.Cause(l.Context()), client.ErrReleased) {
		t.Fatalf("after Release: done %v, Err %v", isDone(l), l.Err())
	}
	if _, _, ok := srv.Holder("k"); ok {
		t.Fatal("the server still holds k after Release")
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatalf("second Release = %v, want nil", err)
	}
}

// TestLeaseLostExactlyAtDeadline: extensions fail, and the lease is declared
// lost at its give-up point after the last confirmed send, not a tick before.
func TestLeaseLostExactlyAtDeadline(t *testing.T) {
	for _, tc := range []struct {
		fault  string
		reason error
	}{
		{"unavailable", client.ErrUnavailable},
		{"drop", client.ErrUnreachable},
	} {
		t.Run(tc.fault, func(t *testing.T) {
			leakCheck(t)
			clk := newFakeClock()
			srv, c := newPair(t, clk)
			l, err := c.TryAcquire(context.Background(), "k", client.WithTTL(ttl))
			if err != nil {
				t.Fatal(err)
			}
			sent := clk.Now()
			srv.Fail("extend", tc.fault)
			clk.Advance(ttl/3 + ttl/30) // the first extension is due by now
			waitFor(t, "a failed extension", func() bool { return l.LastErr() != nil })
			clk.Advance(sent.Add(giveUpOf(ttl)).Sub(clk.Now()) - time.Millisecond)
			if isDone(l) || l.Err() != nil {
				t.Fatalf("lost 1ms before the deadline: %v", l.Err())
			}
			clk.Advance(time.Millisecond)
			if !isDone(l) {
				t.Fatal("not lost at the deadline")
			}
			err = l.Err()
			var le *client.LostError
			if !errors.Is(err, client.ErrLeaseLost) || !errors.Is(err, tc.reason) || !errors.As(err, &le) || le.Token != 1 {
				t.Fatalf("Err = %v, want ErrLeaseLost and %v", err, tc.reason)
			}
			if got := l.HeldUntil(); !got.Equal(sent.Add(ttl)) {
				t.Fatalf("HeldUntil = send+%v, want send+TTL", got.Sub(sent))
			}
			srv.Fail("extend", "")
			if err := l.Release(context.Background()); !errors.Is(err, client.ErrLeaseLost) {
				t.Fatalf("Release after loss = %v, want the loss", err)
			}
		})
	}
}

// TestLeaseExpiresWhenPaused: the process sleeps through its deadline (as if
// SIGSTOPped); the lease is lost with ErrExpired even though nothing failed.
func TestLeaseExpiresWhenPaused(t *testing.T) {
	leakCheck(t)
	clk := newFakeClock()
	_, c := newPair(t, clk)
	l, err := c.TryAcquire(context.Background(), "k", client.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	clk.Jump(2 * ttl) // frozen past the deadline, then running again
	if !isDone(l) || !errors.Is(l.Err(), client.ErrExpired) || !errors.Is(context.Cause(l.Context()), client.ErrExpired) {
		t.Fatalf("after a pause of 2×TTL: done %v, Err %v; want ErrExpired", isDone(l), l.Err())
	}
	_ = l.Release(context.Background())
}

// TestLeaseRefusedExtend: the server says the lease is no longer ours; the
// handle gives up at once, well before its deadline.
func TestLeaseRefusedExtend(t *testing.T) {
	leakCheck(t)
	clk := newFakeClock()
	srv, c := newPair(t, clk)
	l, err := c.TryAcquire(context.Background(), "k", client.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	srv.Fail("extend", "not_held")
	clk.Advance(ttl/3 + ttl/30)
	waitFor(t, "the loss", func() bool { return isDone(l) })
	if err := l.Err(); !errors.Is(err, client.ErrLeaseLost) || !errors.Is(err, client.ErrNotHeld) {
		t.Fatalf("Err = %v, want ErrLeaseLost and ErrNotHeld", err)
	}
	if !clk.Now().Before(l.Deadline()) {
		t.Fatal("the refusal should end the lease before its deadline")
	}
	_ = l.Release(context.Background())
}

// TestLeaseRecoversFromTransientFailure: one failed extension is retried and
// the lease goes on.
func TestLeaseRecoversFromTransientFailure(t *testing.T) {
	leakCheck(t)
	clk := newFakeClock()
	srv, c := newPair(t, clk)
	l, err := c.TryAcquire(context.Background(), "k", client.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	first := l.Deadline()
	srv.Fail("extend", "unavailable")
	clk.Advance(ttl/3 + ttl/30)
	waitFor(t, "a failed extension", func() bool { return l.LastErr() != nil })
	srv.Fail("extend", "")
	for l.Deadline().Equal(first) {
		if !clk.Now().Before(first) {
			t.Fatal("no retry succeeded before the deadline")
		}
		clk.Advance(10 * time.Millisecond)
		time.Sleep(time.Millisecond) // let the keep-alive run; correctness is decided by Deadline below
	}
	if l.Err() != nil || l.LastErr() != nil {
		t.Fatalf("after recovery: Err %v, LastErr %v", l.Err(), l.LastErr())
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestAcquireWaitsFIFO(t *testing.T) {
	leakCheck(t)
	clk := newFakeClock()
	srv, c := newPair(t, clk)
	ctx := context.Background()
	a, err := c.TryAcquire(ctx, "k", client.WithTTL(ttl), client.WithHolder("a"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryAcquire(ctx, "k", client.WithHolder("b")); !errors.Is(err, client.ErrHeld) {
		t.Fatalf("TryAcquire on a held key = %v, want ErrHeld", err)
	}
	type result struct {
		l   *client.Lease
		err error
	}
	got := make(chan result, 2)
	for _, h := range []string{"b", "c"} {
		go func() {
			l, err := c.Acquire(ctx, "k", client.WithTTL(ttl), client.WithHolder(h))
			got <- result{l, err}
		}()
		waitFor(t, h+" to queue", func() bool { return len(srv.Waiters("k")) == map[string]int{"b": 1, "c": 2}[h] })
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	b := <-got
	if b.err != nil || b.l.Holder() != "b" || b.l.Token() != 2 {
		t.Fatalf("first waiter granted %v, %v; want b with token 2", b.l, b.err)
	}
	if err := b.l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	cr := <-got
	if cr.err != nil || cr.l.Holder() != "c" || cr.l.Token() != 3 {
		t.Fatalf("second waiter: %v, %v; want c with token 3", cr.l, cr.err)
	}
	if err := cr.l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestAcquireAfterLongWaitRedatesGrant: a grant that arrives TTL after it was
// asked for cannot be dated from the ask; Acquire confirms it with an
// extension so the deadline is the give-up point from now, not already past.
func TestAcquireAfterLongWaitRedatesGrant(t *testing.T) {
	leakCheck(t)
	clk := newFakeClock()
	// No node check during the wait: the clock jumps past its answer
	// bound while the check is out, which would leave the node.
	srv, c := newPair(t, clk, client.WithWaitCheck(time.Hour))
	ctx := context.Background()
	// a holds with a plain grant: nothing extends it, so it will expire.
	if _, err := c.Grant(ctx, "k", "a", ttl, 0); err != nil {
		t.Fatal(err)
	}
	type result struct {
		l   *client.Lease
		err error
	}
	got := make(chan result, 1)
	go func() {
		l, err := c.Acquire(ctx, "k", client.WithTTL(ttl))
		got <- result{l, err}
	}()
	waitFor(t, "the waiter to queue", func() bool { return len(srv.Waiters("k")) == 1 })
	clk.Advance(ttl)
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	if srv.Count("extend") != 1 {
		t.Fatalf("%d extensions, want the one that dates the grant", srv.Count("extend"))
	}
	if d := r.l.Deadline().Sub(clk.Now()); d != giveUpOf(ttl) {
		t.Fatalf("deadline %v away, want %v", d, giveUpOf(ttl))
	}
	if err := r.l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestAcquireCancelLeavesQueue(t *testing.T) {
	leakCheck(t)
	clk := newFakeClock()
	srv, c := newPair(t, clk)
	a, err := c.TryAcquire(context.Background(), "k", client.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := c.Acquire(ctx, "k", client.WithTTL(ttl))
		errc <- err
	}()
	waitFor(t, "the waiter to queue", func() bool { return len(srv.Waiters("k")) == 1 })
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Acquire = %v, want context.Canceled", err)
	}
	waitFor(t, "the queue to empty", func() bool { return len(srv.Waiters("k")) == 0 })
	if err := a.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := srv.Holder("k"); ok {
		t.Fatal("the key went to a waiter that had given up")
	}
}

func TestAcquireWaitBound(t *testing.T) {
	leakCheck(t)
	clk := newFakeClock()
	// The clock jumps the whole wait at once, so no node check may fall
	// within it: the check the 1 s cadence sends during the jump arms its
	// own 1 s timeout at the jump's midpoint, and when that timeout runs
	// before the jump ends (1 in about 200 runs under -race) the node is
	// "silent" on the fake clock, the attempt is abandoned, and the retry's
	// pause waits on a clock that no one moves again.
	srv, c := newPair(t, clk, client.WithWaitCheck(time.Minute))
	a, err := c.TryAcquire(context.Background(), "k", client.WithTTL(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := c.Acquire(context.Background(), "k", client.WithWait(2*time.Second))
		errc <- err
	}()
	waitFor(t, "the waiter to queue", func() bool { return len(srv.Waiters("k")) == 1 })
	clk.Advance(2 * time.Second)
	select {
	case err := <-errc:
		if !errors.Is(err, client.ErrHeld) {
			t.Fatalf("Acquire past its wait = %v, want ErrHeld", err)
		}
	case <-time.After(10 * time.Second): // a bound on a hang, not a timing
		t.Fatalf("Acquire did not end at its wait's end: %d client timers, %d armed in all, waiters %v",
			clk.Pending(), clk.Scheduled(), srv.Waiters("k"))
	}
	if len(srv.Waiters("k")) != 0 {
		t.Fatal("the waiter is still queued")
	}
	_ = a.Release(context.Background())
}

func TestAcquireRejectsBadTTL(t *testing.T) {
	_, c := newPair(t, newFakeClock())
	if _, err := c.TryAcquire(context.Background(), "k", client.WithTTL(0)); !errors.Is(err, client.ErrInvalid) {
		t.Fatalf("TTL 0 = %v, want ErrInvalid", err)
	}
}
