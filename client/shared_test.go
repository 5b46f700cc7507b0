package client_test

import (
	"context"
	"errors"
	"testing"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/client"
)

// TestSemaphorePermitsAreLeases: each permit is its own lease with its own
// token, kept alive by extensions on the injected clock, lost at its
// give-up point when its extensions are refused, and the next waiter gets
// the permit a release frees.
func TestSemaphorePermitsAreLeases(t *testing.T) {
	leakCheck(t)
	ctx := context.Background()
	clk := newFakeClock()
	srv, c := newPair(t, clk)
	a, err := c.AcquireSemaphore(ctx, "pool", 2, client.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.AcquireSemaphore(ctx, "pool", 2, client.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	if a.Token() == b.Token() || a.Holder() == b.Holder() || a.Lock().Kind != api.KindSemaphore || a.Lock().Permits != 2 {
		t.Fatalf("two permits: %+v %+v", a.Lock(), b.Lock())
	}
	if _, err := c.TryAcquire(ctx, "pool", client.WithPermits(2)); !errors.Is(err, client.ErrHeld) {
		t.Fatalf("third permit without waiting: %v", err)
	}
	_, err = c.TryAcquire(ctx, "pool", client.WithPermits(5))
	var ae *client.APIError
	if !errors.Is(err, client.ErrKindMismatch) || !errors.As(err, &ae) || ae.Kind != api.KindSemaphore || ae.Permits != 2 {
		t.Fatalf("another limit: %v", err)
	}
	if _, err := c.TryAcquire(ctx, "pool"); !errors.Is(err, client.ErrKindMismatch) {
		t.Fatalf("exclusive on a semaphore: %v", err)
	}

	// Both permits are kept alive: one extension each per TTL/3.
	waitFor(t, "the keep-alives to sleep", func() bool { return clk.Pending() == 4 })
	for srv.Count("extend") < 2 {
		n := srv.Count("extend")
		next, _ := clk.Next()
		clk.Advance(next)
		waitFor(t, "the keep-alives to sleep again", func() bool { return clk.Pending() == 4 && srv.Count("extend") > n })
	}
	if a.Err() != nil || b.Err() != nil || a.Token() != a.Lock().Token {
		t.Fatalf("permits lost: %v %v", a.Err(), b.Err())
	}

	third := make(chan *client.Lease, 1)
	go func() {
		l, err := c.AcquireSemaphore(ctx, "pool", 2, client.WithTTL(ttl), client.WithHolder("third"))
		if err != nil {
			t.Error(err)
		}
		third <- l
	}()
	waitFor(t, "the third to queue", func() bool { return len(srv.Waiters("pool")) == 1 })

	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l := <-third
	if l == nil || l.Token() <= b.Token() || l.Holder() != "third" {
		t.Fatalf("third permit: %+v", l)
	}
	// A permit whose extensions are refused is lost at the give-up point
	// after its last confirmed extension, like any lease.
	srv.Fail("extend", api.CodeUnavailable)
	for !isDone(b) {
		next, ok := clk.Next()
		if !ok {
			t.Fatal("no timer left, yet b is not lost")
		}
		clk.Advance(next)
		waitFor(t, "the client to settle", func() bool { return clk.Pending() > 0 || isDone(b) })
	}
	if !errors.Is(b.Err(), client.ErrLeaseLost) {
		t.Fatalf("b: %v", b.Err())
	}
	srv.Fail("extend", "")
	_ = b.Release(ctx)
	_ = l.Release(ctx)
}

// TestReadWriteLeases: readers share the key, a writer waits for them and
// holds it alone; a reader that does not wait is refused while it does.
func TestReadWriteLeases(t *testing.T) {
	leakCheck(t)
	ctx := context.Background()
	clk := newFakeClock()
	srv, c := newPair(t, clk)
	r1, err := c.AcquireRead(ctx, "doc", client.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	r2, err := c.AcquireRead(ctx, "doc", client.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	if r1.Lock().Mode != api.ModeRead || r1.Lock().Kind != api.KindRWLock {
		t.Fatalf("reader: %+v", r1.Lock())
	}
	w := make(chan *client.Lease, 1)
	go func() {
		l, err := c.AcquireWrite(ctx, "doc", client.WithTTL(ttl), client.WithHolder("writer"))
		if err != nil {
			t.Error(err)
		}
		w <- l
	}()
	waitFor(t, "the writer to queue", func() bool { return len(srv.Waiters("doc")) == 1 })
	if _, err := c.TryAcquire(ctx, "doc", client.WithRead()); !errors.Is(err, client.ErrHeld) {
		t.Fatalf("a reader behind a queued writer: %v", err)
	}
	if err := r1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wl := <-w
	if wl == nil || wl.Lock().Mode != api.ModeWrite || wl.Token() <= r2.Token() {
		t.Fatalf("writer: %+v", wl)
	}
	got, err := c.Get(ctx, "doc")
	if err != nil || len(got.Holders) != 1 || got.Holders[0].Holder != "writer" {
		t.Fatalf("get: %+v %v", got, err)
	}
	if err := wl.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
