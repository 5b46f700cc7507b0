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

// twoNodes is a client for nodes a and b, and a lease on "k" taken on a
// that b knows too, as the replica that the cluster elects next would.
func twoNodes(t *testing.T, clk *clock.Fake, opts ...client.Option) (a, b *clienttest.Server, c *client.Client, l *client.Lease) {
	t.Helper()
	a, b = clienttest.NewServer(clk), clienttest.NewServer(clk)
	c, err := client.New([]string{a.Addr, b.Addr}, append([]client.Option{client.WithClock(clk)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	cb, err := client.New([]string{b.Addr}, client.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); cb.Close(); a.Close(); b.Close() })
	ctx := context.Background()
	l, err = c.TryAcquire(ctx, "k", client.WithTTL(ttl), client.WithHolder("h"))
	if err != nil {
		t.Fatal(err)
	}
	if lk, err := cb.Grant(ctx, "k", "h", ttl, 0); err != nil || lk.Token != l.Token() {
		t.Fatalf("replica grant = %v, %v; want token %d", lk, err, l.Token())
	}
	t.Cleanup(func() { _ = l.Release(context.Background()) })
	return a, b, c, l
}

// threeNodes is a client for nodes a, b and c3, a lease on "k" of the
// given TTL taken on a, and the same grant made on the replica the
// cluster will elect (replica, one of b and c3), as it would know it.
func threeNodes(t *testing.T, clk *clock.Fake, leaseTTL time.Duration, replica func(b, c3 *clienttest.Server) *clienttest.Server) (a, b, c3 *clienttest.Server, c *client.Client, l *client.Lease) {
	t.Helper()
	a, b, c3 = clienttest.NewServer(clk), clienttest.NewServer(clk), clienttest.NewServer(clk)
	c, err := client.New([]string{a.Addr, b.Addr, c3.Addr}, client.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); a.Close(); b.Close(); c3.Close() })
	ctx := context.Background()
	l, err = c.TryAcquire(ctx, "k", client.WithTTL(leaseTTL), client.WithHolder("h"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Release(context.Background()) })
	r := replica(b, c3)
	cr, err := client.New([]string{r.Addr}, client.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cr.Close)
	if lk, err := cr.Grant(ctx, "k", "h", leaseTTL, 0); err != nil || lk.Token != l.Token() {
		t.Fatalf("replica grant = %v, %v; want token %d", lk, err, l.Token())
	}
	return a, b, c3, c, l
}

// TestLeaseExtendFailsOver: the node the lease was taken on dies, freezes or
// stops leading; the keep-alive's next attempt goes to the other node, which
// confirms the extension under the same token, well before the deadline.
// Nothing here waits on the clock: time moves only when the test says.
func TestLeaseExtendFailsOver(t *testing.T) {
	for _, fault := range []string{"dead", "drop", "hang", "not_leader"} {
		t.Run(fault, func(t *testing.T) {
			leakCheck(t)
			clk := newFakeClock()
			a, b, c, l := twoNodes(t, clk)
			token := l.Token()
			switch fault {
			case "dead":
				a.Close()
			case "drop", "hang":
				a.Fail("extend", fault)
			case "not_leader":
				a.NotLeader(&b.Addr)
			}
			// At rest: the lease's deadline and the keep-alive's sleep
			// (the servers' own timers are not counted).
			waitFor(t, "the keep-alive to sleep", func() bool { return clk.Pending() == 2 })
			next, _ := clk.Next()
			clk.Advance(next) // the first extension is due
			sent := clk.Now()
			if fault == "hang" {
				// The attempt at a gets no answer. Once it has waited the
				// hedge delay, a part of its timeout, b is asked beside it.
				waitFor(t, "the extension to reach a", func() bool { return a.Count("extend") == 1 })
				// At rest: the lease's deadline, and now the attempt's
				// timeout and its hedge instead of the keep-alive's sleep.
				waitFor(t, "the attempt's timers", func() bool { return clk.Pending() == 3 && l.Waiting(a.URL) })
				if b.Count("extend") != 0 {
					t.Fatal("b was asked before a's attempt had waited the hedge delay")
				}
				if h := l.HedgeDelay(); h >= l.AttemptTimeout() {
					t.Fatalf("hedge delay %v, not less than the attempt's timeout %v", h, l.AttemptTimeout())
				}
				clk.Advance(l.HedgeDelay() - time.Millisecond)
				waitFor(t, "the keep-alive to wait on", func() bool { return l.Waiting(a.URL) })
				if b.Count("extend") != 0 {
					t.Fatal("b was asked before a's attempt had waited the hedge delay")
				}
				clk.Advance(time.Millisecond)
				sent = clk.Now()
			}
			waitFor(t, "the extension to reach b", func() bool { return b.Count("extend") == 1 })
			waitFor(t, "the confirmation", func() bool { return l.Deadline().Equal(sent.Add(giveUpOf(ttl))) })
			if err := l.Err(); err != nil || l.Token() != token || l.Context().Err() != nil {
				t.Fatalf("after failover: Err %v, token %d (want %d), ctx %v", err, l.Token(), token, l.Context().Err())
			}
			if !sent.Before(l.Deadline()) || clk.Now().Sub(sent) != 0 {
				t.Fatal("the confirmation must be dated from its own send")
			}
			if h, tok, ok := b.Holder("k"); !ok || h != "h" || tok != token {
				t.Fatalf("b: %q %d %v; the failover must extend, not re-acquire", h, tok, ok)
			}
			if got := c.Addrs()[0]; got != b.URL {
				t.Fatalf("preferred address %s, want b %s", got, b.URL)
			}
			// The next extension goes straight to b.
			aBefore := a.Count("extend")
			waitFor(t, "the keep-alive to sleep", func() bool { return clk.Pending() == 2 })
			next, _ = clk.Next()
			clk.Advance(next)
			waitFor(t, "the second extension", func() bool { return b.Count("extend") == 2 })
			if a.Count("extend") != aBefore {
				t.Fatal("the second extension went to a again")
			}
			if l.Err() != nil || l.Token() != token {
				t.Fatalf("after the second extension: %v, token %d", l.Err(), l.Token())
			}
		})
	}
}

// TestLeaseLostWhenNoNodeConfirms: with every node failing, the lease is
// still lost exactly at the give-up point after the last confirmed send, whatever
// the number of addresses tried.
func TestLeaseLostWhenNoNodeConfirms(t *testing.T) {
	leakCheck(t)
	clk := newFakeClock()
	a, b, _, l := twoNodes(t, clk)
	last := l.Deadline().Add(-giveUpOf(ttl))
	a.Fail("extend", "drop")
	b.NotLeader(&a.Addr)
	waitFor(t, "the keep-alive to sleep", func() bool { return clk.Pending() == 2 })
	next, _ := clk.Next()
	clk.Advance(next)
	waitFor(t, "a failed extension at b", func() bool { return b.Count("extend") >= 1 })
	for clk.Now().Before(last.Add(giveUpOf(ttl) - time.Millisecond)) {
		step := min(10*time.Millisecond, last.Add(giveUpOf(ttl)-time.Millisecond).Sub(clk.Now()))
		clk.Advance(step)
		if isDone(l) {
			t.Fatalf("lost %v before the deadline: %v", l.Deadline().Sub(clk.Now()), l.Err())
		}
	}
	clk.Advance(time.Millisecond)
	if !isDone(l) {
		t.Fatal("not lost at the deadline")
	}
	if err := l.Err(); !errors.Is(err, client.ErrLeaseLost) || !errors.Is(err, client.ErrUnavailable) && !errors.Is(err, client.ErrUnreachable) {
		t.Fatalf("Err = %v, want ErrLeaseLost for an unreachable cluster", err)
	}
	if a.Count("extend") < 1 || b.Count("extend") < 1 {
		t.Fatalf("extends tried: a %d, b %d; want every node tried", a.Count("extend"), b.Count("extend"))
	}
}

// TestAcquireWaitMovesOffAStuckNode: a waiting acquire is queued on a node
// that then freezes (answers nothing) or fails its health check. The
// client notices through its periodic check and sends
// the same request, same request_id, to the other node, which grants it.
func TestAcquireWaitMovesOffAStuckNode(t *testing.T) {
	for _, fault := range []string{"frozen", "unhealthy"} {
		t.Run(fault, func(t *testing.T) {
			leakCheck(t)
			clk := newFakeClock()
			a, b := clienttest.NewServer(clk), clienttest.NewServer(clk)
			c, err := client.New([]string{a.Addr, b.Addr}, client.WithClock(clk), client.WithWaitCheck(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			ca, err := client.New([]string{a.Addr}, client.WithClock(clk))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close(); ca.Close(); a.Close(); b.Close() })
			ctx := context.Background()
			if _, err := ca.Grant(ctx, "k", "x", time.Hour, 0); err != nil {
				t.Fatal(err)
			}
			type result struct {
				l   *client.Lease
				err error
			}
			got := make(chan result, 1)
			go func() {
				l, err := c.Acquire(ctx, "k", client.WithTTL(ttl), client.WithHolder("w"))
				got <- result{l, err}
			}()
			waitFor(t, "the wait to queue on a", func() bool { return len(a.Waiters("k")) == 1 })
			// A healthy node is checked and kept. The client's timers at
			// rest are the check's sleep and the send of the wait's next
			// round, an hour on (the wait's bound and x's expiry are the
			// server's).
			waitFor(t, "the check's sleep", func() bool { return clk.Pending() == 2 })
			// The check arms its answer bound, then (answered) its next
			// sleep: both are 1s timers, so wait for the second one made.
			armed := clk.Scheduled()
			clk.Advance(time.Second)
			waitFor(t, "the first check", func() bool { return a.Count("healthz") == 1 })
			waitFor(t, "the check's sleep", func() bool { return clk.Scheduled() == armed+2 && clk.Pending() == 2 })
			if len(a.Waiters("k")) != 1 || b.Count("acquire") != 0 {
				t.Fatal("the wait left a node that answered its check")
			}
			switch fault {
			case "frozen":
				a.Fail("healthz", "hang")
			case "unhealthy":
				a.Fail("healthz", "unavailable")
			}
			clk.Advance(time.Second)
			waitFor(t, "the second check", func() bool { return a.Count("healthz") == 2 })
			if fault == "frozen" {
				waitFor(t, "the check's timeout", func() bool { return clk.Pending() == 2 })
				clk.Advance(time.Second)
			}
			var r result
			select {
			case r = <-got:
			case <-time.After(10 * time.Second): // a bound on a hang, not a timing
				t.Fatal("the wait is still stuck on a")
			}
			if r.err != nil {
				t.Fatal(r.err)
			}
			t.Cleanup(func() { _ = r.l.Release(context.Background()) })
			if r.l.Holder() != "w" || r.l.Token() != 1 {
				t.Fatalf("granted %q token %d; want w with b's token 1", r.l.Holder(), r.l.Token())
			}
			if h, tok, ok := b.Holder("k"); !ok || h != "w" || tok != 1 {
				t.Fatalf("b: %q %d %v", h, tok, ok)
			}
			ia, ib := a.RequestIDs("acquire")[1:], b.RequestIDs("acquire") // a's first is x's grant
			if len(ia) != 1 || len(ib) != 1 || ia[0] != ib[0] {
				t.Fatalf("request ids: a %v, b %v; want the same one re-sent", ia, ib)
			}
			waitFor(t, "a's queue to empty", func() bool { return len(a.Waiters("k")) == 0 })
		})
	}
}

// TestLeaseExtendPassesOverASilentNode: the leader a freezes just as an
// extension is due, and the others have not elected anyone yet. Once the
// attempt at a has gone unanswered for the hedge delay, b and c are asked
// beside it and answer not_leader naming nobody; after the pause the next
// round asks them again, not a, whose attempt is still out: c, elected
// meanwhile, confirms before a's attempt has timed out. A frozen leader
// costs a hedge delay of the failover allowance, not an attempt's timeout
// per round.
func TestLeaseExtendPassesOverASilentNode(t *testing.T) {
	leakCheck(t)
	clk := newFakeClock()
	// c3 is the replica the cluster will elect: it knows the grant.
	a, b, c3, c, l := threeNodes(t, clk, ttl, func(_, c3 *clienttest.Server) *clienttest.Server { return c3 })
	nobody := ""
	a.Fail("extend", "hang")
	b.NotLeader(&nobody)
	c3.NotLeader(&nobody)

	// At rest: the lease's deadline and the keep-alive's sleep (the
	// servers' own timers are not counted).
	waitFor(t, "the keep-alive to sleep", func() bool { return clk.Pending() == 2 })
	next, _ := clk.Next()
	clk.Advance(next)
	start := clk.Now()
	waitFor(t, "the extension to reach a", func() bool { return a.Count("extend") == 1 && l.Waiting(a.URL) })
	clk.Advance(l.HedgeDelay())
	waitFor(t, "round one to reach b and c", func() bool {
		return b.Count("extend") == 1 && c3.Count("extend") == 1 && l.Waiting(a.URL)
	})
	c3.NotLeader(nil) // c has won its election
	// Step through the pause; the next round reaches c.
	for c3.Count("extend") < 2 {
		if clk.Now().Sub(start) >= l.AttemptTimeout() {
			t.Fatalf("c not asked again within a's attempt timeout %v", l.AttemptTimeout())
		}
		clk.Advance(time.Millisecond)
		waitFor(t, "the keep-alive to wait on the clock", func() bool { return c3.Count("extend") >= 2 || l.Waiting(a.URL) })
	}
	sent := clk.Now()
	waitFor(t, "the confirmation", func() bool { return l.Deadline().Equal(sent.Add(giveUpOf(ttl))) })
	if n := a.Count("extend"); n != 1 {
		t.Fatalf("a, frozen, was asked %d times; want once", n)
	}
	if n := b.Count("extend"); n != 2 {
		t.Fatalf("b was asked %d times; want once a round", n)
	}
	if err := l.Err(); err != nil {
		t.Fatalf("lease: %v", err)
	}
	if got := c.Addrs()[0]; got != c3.URL {
		t.Fatalf("preferred address %s, want c %s", got, c3.URL)
	}
}

// TestLeaseExtendAsksSilentNodesAgainWhenNobodyKnowsALeader: the leader a
// is cut off and b, which the cluster elects, does not answer either
// while the election runs (both marked silent); c answers not_leader
// naming nobody. Once b leads, a round of c alone saying it knows no
// leader must send the next round to the silent nodes again: b confirms.
// The keep-alive used to ask c alone until the lease was lost (found by
// internal/sim).
func TestLeaseExtendAsksSilentNodesAgainWhenNobodyKnowsALeader(t *testing.T) {
	leakCheck(t)
	clk := newFakeClock()
	a, b, c3, c, l := threeNodes(t, clk, 6*time.Second, func(b, _ *clienttest.Server) *clienttest.Server { return b })
	nobody := ""
	a.Fail("extend", "hang")
	b.Fail("extend", "hang")
	c3.NotLeader(&nobody)
	// The clock moves in steps until a and b have each been left once.
	waitFor(t, "a and b to be asked and left", func() bool {
		if a.Count("extend") >= 1 && b.Count("extend") >= 1 && c3.Count("extend") >= 2 {
			return true
		}
		clk.Advance(10 * time.Millisecond)
		return false
	})
	b.Fail("extend", "") // b won its election and answers
	waitFor(t, "b to confirm", func() bool {
		if l.Err() != nil || b.Count("extend") >= 2 {
			return true
		}
		clk.Advance(10 * time.Millisecond)
		return false
	})
	if err := l.Err(); err != nil {
		t.Fatalf("lease lost while b, elected, answered: %v", err)
	}
	waitFor(t, "the preferred address to be b", func() bool { return c.Addrs()[0] == b.URL })
}

// A node that refuses connections (down) tells nothing about the nodes
// that went silent, one of which may have been elected meanwhile: a round
// whose only answers are refusals asks the silent nodes again, instead
// of asking the dead one alone until the lease is given up. (Found by the
// simulation: a leader frozen in a five-node cluster with a node down for
// good cost a 3 s lease, RELIABILITY.md.)
func TestLeaseExtendAsksSilentNodesAgainWhenTheOthersRefuse(t *testing.T) {
	leakCheck(t)
	clk := newFakeClock()
	a, b, c3, _, l := threeNodes(t, clk, 6*time.Second, func(b, _ *clienttest.Server) *clienttest.Server { return b })
	a.Fail("extend", "hang")
	b.Fail("extend", "hang")
	c3.Close() // down: every call is refused at once
	waitFor(t, "a and b to be asked and left", func() bool {
		if a.Count("extend") >= 1 && b.Count("extend") >= 1 {
			return true
		}
		clk.Advance(10 * time.Millisecond)
		return false
	})
	b.Fail("extend", "") // b won its election and answers
	waitFor(t, "b to confirm", func() bool {
		if l.Err() != nil || b.Count("extend") >= 2 {
			return true
		}
		clk.Advance(10 * time.Millisecond)
		return false
	})
	if err := l.Err(); err != nil {
		t.Fatalf("lease lost while b, elected, answered: %v", err)
	}
}
