package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/client/clienttest"
	"github.com/fencelock/fencelock/clock"
)

// heldOnBoth starts nodes a and b, both knowing that x holds "k" for an
// hour (as the leader and the replica elected next do), and a client for
// both whose node check runs every nodeCheck.
func heldOnBoth(t *testing.T, clk *clock.Fake) (a, b *clienttest.Server, c *client.Client) {
	t.Helper()
	a, b = clienttest.NewServer(clk), clienttest.NewServer(clk)
	c, err := client.New([]string{a.Addr, b.Addr}, client.WithClock(clk), client.WithWaitCheck(nodeCheck))
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

// nodeCheck is how often heldOnBoth's client asks a waiting attempt's
// node whether it still answers. The nodes here close loudly, so no check
// is needed, and none may fall due while the tests step the clock: a check
// sent by one step arms its own timeout (nodeCheck) on the clock, which a
// later step took for the one timer of a client at rest and ran, so that
// a node that answered in microseconds was left as silent (on a busy
// machine, 1 run in 8 to 30 of TestWaitKeepsItsEndAcrossAFailover, which
// then waited for a wait that had already moved).
const nodeCheck = time.Minute

// stepUntil moves the fake clock from one client timer to the next (a
// pause between retries) while the client is at rest with one timer
// armed, until done reports true or the clock reaches until. A timer
// nodeCheck or more away is a node check or its timeout: the clock moves
// towards it in steps of 10ms, never onto it, and what the servers have
// armed meanwhile (the end of a wait) runs on the way.
func stepUntil(t *testing.T, clk *clock.Fake, until time.Time, done func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !done() && clk.Now().Before(until); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) { // a bound on a hang, not a timing
			t.Fatalf("stuck at %v with %d client timers", clk.Now(), clk.Pending())
		}
		if d, ok := clk.Next(); ok && clk.Pending() == 1 {
			if d >= nodeCheck {
				d = 10 * time.Millisecond
			}
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

// waitLeft is how long holder's queue place on key at srv has left
// before the server drops it, from the server's overview; false when
// holder is not queued there.
func waitLeft(t *testing.T, srv *clienttest.Server, key, holder string) (time.Duration, bool) {
	t.Helper()
	resp, err := http.Get(srv.URL + api.PathOverview)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var ov api.Overview
	if err := json.NewDecoder(resp.Body).Decode(&ov); err != nil {
		t.Fatal(err)
	}
	for _, l := range ov.Locks {
		if l.Key != key {
			continue
		}
		for _, w := range l.Waiters {
			if w.Holder == holder {
				return time.Duration(w.LeftMs) * time.Millisecond, true
			}
		}
	}
	return 0, false
}

// TestLongWaitKeepsItsPlace (issue 27 item 2): a wait without end keeps
// its place in the queue for hours, although the server waits at most an
// hour per request. A queued first and B a minute later; three hours on,
// the key is released and A, not B, gets it. Before, each wait queued
// again at the back every hour, so B, re-queued first, went first.
func TestLongWaitKeepsItsPlace(t *testing.T) {
	leakCheck(t)
	clk := newFakeClock()
	// No node checks in three hours: only the rounds' timers move the clock.
	srv, c := newPair(t, clk, client.WithWaitCheck(24*time.Hour))
	x, err := c.Grant(context.Background(), "k", "x", 10*time.Hour, 0)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		l   *client.Lease
		err error
	}
	wait := func(holder string) chan result {
		got := make(chan result, 1)
		go func() {
			l, err := c.Acquire(context.Background(), "k", client.WithHolder(holder), client.WithTTL(time.Minute))
			got <- result{l, err}
		}()
		return got
	}
	gotA := wait("A")
	waitFor(t, "A to queue", func() bool { return len(srv.Waiters("k")) == 1 })
	clk.Advance(time.Minute)
	gotB := wait("B")
	waitFor(t, "B to queue", func() bool { return len(srv.Waiters("k")) == 2 })
	start := clk.Now()
	for clk.Now().Before(start.Add(3 * time.Hour)) {
		// The client's timers: A's and B's next rounds, their node checks
		// a day away, and for a minute after a round was sent the check
		// of the round it overlaps. Move to the next; once a round is
		// sent, the clock stands still until the server has taken its new
		// deadline, as it would in the moment a real request takes (and
		// by then the new round has armed its timers).
		waitFor(t, "both waits' timers", func() bool { return clk.Pending() >= 4 })
		d, _ := clk.Next()
		clk.Advance(d)
		waitFor(t, "the round's new deadline", func() bool {
			la, okA := waitLeft(t, srv, "k", "A")
			lb, okB := waitLeft(t, srv, "k", "B")
			return okA && okB && max(la, lb) > 59*time.Minute+30*time.Second
		})
		if w := srv.Waiters("k"); len(w) != 2 || w[0] != "A" || w[1] != "B" {
			t.Fatalf("after %v the queue is %v; want [A B]", clk.Now().Sub(start), w)
		}
	}
	if ok, err := c.Release(context.Background(), "k", "x", x.Token); !ok || err != nil {
		t.Fatalf("release x: %v, %v", ok, err)
	}
	var r result
	select {
	case r = <-gotA:
	case r = <-gotB:
		t.Fatalf("B was granted first: %v", r.err)
	case <-time.After(10 * time.Second): // a bound on a hang, not a timing
		t.Fatal("nobody was granted")
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.l.Holder() != "A" {
		t.Fatalf("granted to %q; want A", r.l.Holder())
	}
	if err := r.l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	r = <-gotB
	if r.err != nil {
		t.Fatal(r.err)
	}
	if err := r.l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}
