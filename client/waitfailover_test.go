package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/client/clienttest"
	"github.com/fencelock/fencelock/clock"
)

// heldOnBoth starts nodes a and b, both knowing that x holds "k" for an
// hour (as the leader and the replica elected next do), and a client for
// both whose node check runs every second.
func heldOnBoth(t *testing.T, clk *clock.Fake) (a, b *clienttest.Server, c *client.Client) {
	t.Helper()
	a, b = clienttest.NewServer(clk), clienttest.NewServer(clk)
	c, err := client.New([]string{a.Addr, b.Addr}, client.WithClock(clk), client.WithWaitCheck(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); a.Close(); b.Close() })
	for _, s := range []*clienttest.Server{a, b} {
		cs, err := client.New([]string{s.Addr}, client.WithClock(clk))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cs.Grant(context.Background(), "k", "x", time.Hour, 0); err != nil {
			t.Fatal(err)
		}
		cs.Close()
	}
	return a, b, c
}

// stepUntil moves the fake clock from one client timer to the next (a
// node check, a pause between retries) while the client is at rest with
// one timer armed, until done reports true or the clock reaches until.
func stepUntil(t *testing.T, clk *clock.Fake, until time.Time, done func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !done() && clk.Now().Before(until); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) { // a bound on a hang, not a timing
			t.Fatalf("stuck at %v with %d client timers", clk.Now(), clk.Pending())
		}
		if d, ok := clk.Next(); ok && clk.Pending() == 1 {
			clk.Advance(min(d, until.Sub(clk.Now())))
		}
	}
}

// TestWaitKeepsItsEndAcrossAFailover (issue 26 item 6): a wait of 6s
// whose node dies 3s in goes on at the next node for the 3s left, not
// for another 6s: the end of a wait is where it was, whichever node
// serves it.
func TestWaitKeepsItsEndAcrossAFailover(t *testing.T) {
	leakCheck(t)
	clk := newFakeClock()
	a, b, c := heldOnBoth(t, clk)
	start := clk.Now()
	got := make(chan error, 1)
	go func() {
		l, err := c.Acquire(context.Background(), "k", client.WithHolder("w"), client.WithWait(6*time.Second))
		if err == nil {
			_ = l.Release(context.Background())
			err = errors.New("granted")
		}
		got <- err
	}()
	waitFor(t, "the wait to queue on a", func() bool { return len(a.Waiters("k")) == 1 })
	stepUntil(t, clk, start.Add(3*time.Second), func() bool { return false })
	before := b.Count("acquire")
	a.Close()
	// a answers its waits "shutting down" as it closes, or they are cut
	// off: either way the wait moves to b, maybe after a pause. Only such
	// a pause is stepped through: the clock stands still from the re-send
	// to its arrival, so that b queues it for what was left, 3s.
	for deadline := time.Now().Add(10 * time.Second); b.Count("acquire") == before; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) { // a bound on a hang, not a timing
			t.Fatal("the wait never reached b")
		}
		if d, ok := clk.Next(); ok && d < time.Second && clk.Pending() == 1 {
			clk.Advance(d)
		}
	}
	waitFor(t, "the wait to queue on b", func() bool { return len(b.Waiters("k")) == 1 })
	// Just before the end, it still waits.
	stepUntil(t, clk, start.Add(6*time.Second-time.Millisecond), func() bool { return false })
	select {
	case err := <-got:
		t.Fatalf("the wait ended before its end: %v", err)
	default:
	}
	// At the end, with the clock standing there, b ends it.
	stepUntil(t, clk, start.Add(6*time.Second), func() bool { return false })
	var err error
	select {
	case err = <-got:
	case <-time.After(10 * time.Second): // a bound on a hang, not a timing
		t.Fatalf("the wait did not end at its end: b waiters %v", b.Waiters("k"))
	}
	if !errors.Is(err, client.ErrHeld) {
		t.Fatalf("wait = %v; want ErrHeld", err)
	}
	if n := len(b.Waiters("k")); n != 0 {
		t.Fatalf("%d waiters left on b", n)
	}
}

// TestWaitThatEndsInAnElectionIsHeld (issue 26 item 6): the wait's node
// dies just before the end of the wait, and the next node has no leader
// for longer than one call's retries. The wait goes on past its end until
// a node can answer, and is answered held: the key is held, which is what
// exit status 1 says. Unreachable (exit 3) is for a cluster nobody
// answers for.
func TestWaitThatEndsInAnElectionIsHeld(t *testing.T) {
	leakCheck(t)
	clk := newFakeClock()
	a, b, c := heldOnBoth(t, clk)
	nobody := ""
	b.NotLeader(&nobody)
	start := clk.Now()
	got := make(chan error, 1)
	go func() {
		l, err := c.Acquire(context.Background(), "k", client.WithHolder("w"), client.WithWait(6*time.Second))
		if err == nil {
			_ = l.Release(context.Background())
			err = errors.New("granted")
		}
		got <- err
	}()
	waitFor(t, "the wait to queue on a", func() bool { return len(a.Waiters("k")) == 1 })
	stepUntil(t, clk, start.Add(5*time.Second), func() bool { return false })
	a.Close()
	var err error
	ended := func() bool {
		select {
		case err = <-got:
			return true
		default:
			return false
		}
	}
	// The election outlasts one call's retries (7 tries at b, 6 pauses).
	stepUntil(t, clk, start.Add(time.Hour), func() bool { return ended() || b.Count("acquire") > 10 })
	if err != nil {
		t.Fatalf("the wait ended during the election: %v", err)
	}
	b.NotLeader(nil)
	stepUntil(t, clk, start.Add(time.Hour), ended)
	if !errors.Is(err, client.ErrHeld) {
		t.Fatalf("wait = %v; want ErrHeld once b leads", err)
	}
}
