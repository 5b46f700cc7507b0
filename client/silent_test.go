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

// freeze makes a answer nothing on routes, its health check included: a
// SIGSTOPped leader, whose kernel still accepts connections and takes
// requests into its buffers.
func freeze(a *clienttest.Server, routes ...string) {
	for _, r := range append(routes, "healthz") {
		a.Fail(r, "hang")
	}
}

// stepPastSilence moves the fake clock through the client's check of a
// silent node: the check's sleep, then its answer bound. A call that sits
// on a frozen node is abandoned after these two intervals, and not before.
func stepPastSilence(t *testing.T, clk *clock.Fake, a *clienttest.Server, route string, check time.Duration) {
	t.Helper()
	waitFor(t, "the call to reach the frozen node", func() bool { return a.Count(route) >= 1 })
	waitFor(t, "the check's sleep", func() bool { return clk.Pending() == 1 })
	checks := a.Count("healthz")
	clk.Advance(check)
	waitFor(t, "the check to reach the frozen node", func() bool { return a.Count("healthz") == checks+1 })
	waitFor(t, "the check's answer bound", func() bool { return clk.Pending() == 1 })
	clk.Advance(check)
}

// TestPlainCallsMoveOffASilentNode (issue 26 item 6): a plain call —
// no wait, no deadline of its own, context.Background() as the client
// docs' defer example uses — sent to a node that stops answering moves to
// the next node after the client's check finds the node silent, and is
// answered there. Before, each of these waited on the frozen node for as
// long as the node stayed stopped.
func TestPlainCallsMoveOffASilentNode(t *testing.T) {
	const check = time.Second
	for _, tc := range []struct {
		route string
		call  func(ctx context.Context, c *client.Client) error
	}{
		{"release", func(ctx context.Context, c *client.Client) error {
			ok, err := c.Release(ctx, "k", "h", 1)
			if err == nil && !ok {
				err = errors.New("not released")
			}
			return err
		}},
		{"acquire", func(ctx context.Context, c *client.Client) error {
			_, err := c.Grant(ctx, "other", "h", time.Minute, 0)
			return err
		}},
		{"check", func(ctx context.Context, c *client.Client) error {
			ok, err := c.Check(ctx, "k", 1)
			if err == nil && !ok {
				err = errors.New("token 1 not current")
			}
			return err
		}},
		{"lock", func(ctx context.Context, c *client.Client) error {
			_, err := c.Get(ctx, "k")
			return err
		}},
		{"session/open", func(ctx context.Context, c *client.Client) error {
			_, err := c.OpenSession(ctx, "h", time.Minute)
			return err
		}},
	} {
		t.Run(tc.route, func(t *testing.T) {
			leakCheck(t)
			clk := newFakeClock()
			a, b := clienttest.NewServer(clk), clienttest.NewServer(clk)
			c, err := client.New([]string{a.Addr, b.Addr}, client.WithClock(clk), client.WithWaitCheck(check))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close(); a.Close(); b.Close() })
			// Both nodes know the grant, as a leader and the replica
			// the cluster elects next do.
			for _, s := range []*clienttest.Server{a, b} {
				cs, err := client.New([]string{s.Addr}, client.WithClock(clk))
				if err != nil {
					t.Fatal(err)
				}
				if lk, err := cs.Grant(context.Background(), "k", "h", time.Hour, 0); err != nil || lk.Token != 1 {
					t.Fatalf("grant = %v, %v", lk, err)
				}
				cs.Close()
			}
			freeze(a, tc.route)
			before := b.Count(tc.route)
			got := make(chan error, 1)
			go func() { got <- tc.call(context.Background(), c) }()
			stepPastSilence(t, clk, a, tc.route, check)
			select {
			case err := <-got:
				if err != nil {
					t.Fatalf("%s: %v", tc.route, err)
				}
			case <-time.After(10 * time.Second): // a bound on a hang, not a timing
				t.Fatalf("%s is still waiting on the frozen node", tc.route)
			}
			if n := b.Count(tc.route) - before; n != 1 {
				t.Fatalf("b got %d %s requests; want the call moved there once", n, tc.route)
			}
			if got := c.Addrs()[0]; got != b.URL {
				t.Fatalf("preferred address %s, want b %s", got, b.URL)
			}
		})
	}
}

// TestLeaseReleaseMovesOffASilentNode: the client docs' own
// `defer l.Release(context.Background())` on a lease whose leader froze
// is answered by the next node, and the key is free there at once.
func TestLeaseReleaseMovesOffASilentNode(t *testing.T) {
	leakCheck(t)
	const check = time.Second
	clk := newFakeClock()
	a, b, _, l := twoNodes(t, clk, client.WithWaitCheck(check))
	freeze(a, "release")
	got := make(chan error, 1)
	go func() { got <- l.Release(context.Background()) }()
	stepPastSilence(t, clk, a, "release", check)
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("Release: %v", err)
		}
	case <-time.After(10 * time.Second): // a bound on a hang, not a timing
		t.Fatal("Release is still waiting on the frozen node")
	}
	if _, _, held := b.Holder("k"); held {
		t.Fatal("the key is still held on b")
	}
}

// TestPlainCallPassesOverASilentNode: the leader a froze and b and c have
// not elected anyone yet. A release left on a after its check goes to b
// and c, both answer not_leader naming nobody, and the rounds after the
// pauses must not wait on a again: c, elected meanwhile, releases. A
// frozen node costs a call one check, not one per round.
func TestPlainCallPassesOverASilentNode(t *testing.T) {
	leakCheck(t)
	const check = time.Second
	clk := newFakeClock()
	a, b, c3 := clienttest.NewServer(clk), clienttest.NewServer(clk), clienttest.NewServer(clk)
	c, err := client.New([]string{a.Addr, b.Addr, c3.Addr}, client.WithClock(clk), client.WithWaitCheck(check))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); a.Close(); b.Close(); c3.Close() })
	cc, err := client.New([]string{c3.Addr}, client.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cc.Close)
	if _, err := cc.Grant(context.Background(), "k", "h", time.Hour, 0); err != nil {
		t.Fatal(err)
	}
	nobody := ""
	freeze(a, "release")
	b.NotLeader(&nobody)
	c3.NotLeader(&nobody)
	got := make(chan error, 1)
	go func() {
		ok, err := c.Release(context.Background(), "k", "h", 0)
		if err == nil && !ok {
			err = errors.New("not released")
		}
		got <- err
	}()
	stepPastSilence(t, clk, a, "release", check)
	// b, then c, answer not_leader; each answer is followed by a pause.
	for i, s := range []*clienttest.Server{b, c3} {
		waitFor(t, "the call to reach the next node", func() bool { return s.Count("release") == 1 })
		waitFor(t, "the pause", func() bool { return clk.Pending() == 1 })
		if i == 1 {
			c3.NotLeader(nil) // c has won its election
		}
		pause, _ := clk.Next()
		clk.Advance(pause)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		select {
		case err := <-got:
			if err != nil {
				t.Fatal(err)
			}
			if n := a.Count("release"); n != 1 {
				t.Fatalf("a, silent, was asked %d times; want once", n)
			}
			if _, _, held := c3.Holder("k"); held {
				t.Fatal("the key is still held on c")
			}
			return
		default:
		}
		if time.Now().After(deadline) { // a bound on a hang, not a timing
			t.Fatal("the release never ended")
		}
		// More pauses while b is asked again: move through them.
		if d, ok := clk.Next(); ok && clk.Pending() == 1 {
			clk.Advance(d)
		}
		time.Sleep(time.Millisecond)
	}
}
