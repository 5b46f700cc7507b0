package main

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/fencelock/fencelock/client"
)

// TestClientLeaseAgainstServer runs the Go client's lease handle against a
// real server: it keeps its token across extensions, a cancelled waiter
// does not end up holding the key, and Release frees it. It stays serial:
// a 1 s lease kept alive on a CPU shared with the parallel tests' clusters
// could be lost for want of CPU.
func TestClientLeaseAgainstServer(t *testing.T) {
	dir := t.TempDir()
	addr := freeAddr(t)
	startProc(t, dir, nil, "--listen", addr, "--data", filepath.Join(dir, "data")).waitReady(addr)
	c, err := client.New([]string{addr})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	l, err := c.TryAcquire(ctx, "k", client.WithTTL(time.Second), client.WithHolder("a"))
	if err != nil {
		t.Fatal(err)
	}
	// Two confirmed extensions: the deadline moves twice.
	d0 := l.Deadline()
	eventually(t, "two extensions", func() bool { return l.Deadline().Sub(d0) >= 500*time.Millisecond || l.Err() != nil })
	if err := l.Err(); err != nil {
		t.Fatalf("lease lost while the server was up: %v", err)
	}
	if got, err := c.Get(ctx, "k"); err != nil || got.Token != l.Token() || got.Holder != "a" {
		t.Fatalf("server has %+v, %v; want a with token %d", got, err, l.Token())
	}

	wctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := c.Acquire(wctx, "k", client.WithTTL(time.Second))
		errc <- err
	}()
	// Give the waiter time to reach the queue; whether it did or not, the
	// outcome checked below must hold.
	time.Sleep(100 * time.Millisecond)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Acquire = %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(l.Err(), client.ErrReleased) {
		t.Fatalf("Err after Release = %v", l.Err())
	}
	// Checked at once, not eventually: a grant to the departed waiter would
	// show here (and only expire a TTL later).
	if got, err := c.Get(ctx, "k"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("after Release the server has %+v, %v; want no lease", got, err)
	}
}

// eventually polls cond, bounded; the bound only turns a hang into a failure.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}
