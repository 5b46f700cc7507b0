package client_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/client/clienttest"
	"github.com/fencelock/fencelock/clock"
)

// election is how long the fake cluster below takes to elect a new leader
// after losing its old one: the slow end of the 0.7–1.3 s measured from a
// kill to the first write on the new leader (docs/OPERATIONS.md).
const election = 1300 * time.Millisecond

// settle advances clk by d in steps, letting the keep-alive act between
// steps: before each step it waits until the keep-alive waits on the clock
// alone (asleep, or with an attempt out at one of the hanging addresses)
// with its two timers armed (the lease's deadline and the sleep's or the
// attempt's), or has ended. So fake time never passes while a server is
// answering. Time moves only here.
func settle(t *testing.T, clk *clock.Fake, l *client.Lease, d time.Duration, hanging ...string) {
	t.Helper()
	const step = 5 * time.Millisecond
	rest := func() bool { return isDone(l) || l.Waiting(hanging...) }
	for end := clk.Now().Add(d); clk.Now().Before(end); {
		waitFor(t, "the keep-alive to wait on the clock", rest)
		if isDone(l) {
			return
		}
		clk.Advance(min(step, end.Sub(clk.Now())))
	}
	waitFor(t, "the keep-alive to wait on the clock", rest)
}

// TestLeaseRidesAFailoverAtTheWorstPhase: three nodes; the leader a dies
// (kill) or freezes (its extension hangs) just before an extension is due,
// the worst moment of the cadence. Until the others have elected c, b and
// c answer not_leader naming a, as followers do until they miss its
// heartbeats; then c leads and b names it. With the failover taking as
// long as the slowest measured, the lease must ride through at every TTL
// from 2 s up: its keep-alive reaches c and the extension is confirmed
// before the lease is given up.
func TestLeaseRidesAFailoverAtTheWorstPhase(t *testing.T) {
	for _, ttl := range []time.Duration{2 * time.Second, 3 * time.Second, 6 * time.Second, 10 * time.Second} {
		for _, fault := range []string{"kill", "freeze"} {
			t.Run(fmt.Sprintf("%v/%s", ttl, fault), func(t *testing.T) {
				leakCheck(t)
				clk := newFakeClock()
				a, b, c3 := clienttest.NewServer(clk), clienttest.NewServer(clk), clienttest.NewServer(clk)
				c, err := client.New([]string{a.Addr, b.Addr, c3.Addr}, client.WithClock(clk))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Close(); a.Close(); b.Close(); c3.Close() })
				ctx := context.Background()
				l, err := c.TryAcquire(ctx, "k", client.WithTTL(ttl), client.WithHolder("h"))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = l.Release(context.Background()) })
				// c is the replica the cluster will elect: it knows the
				// grant, with a TTL long enough to outlive the test.
				cc, err := client.New([]string{c3.Addr}, client.WithClock(clk))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(cc.Close)
				if lk, err := cc.Grant(ctx, "k", "h", time.Hour, 0); err != nil || lk.Token != l.Token() {
					t.Fatalf("replica grant = %v, %v; want token %d", lk, err, l.Token())
				}
				waitFor(t, "the keep-alive to sleep", func() bool { return clk.Pending() == 2 })
				// Ride one extension first, so that the cadence is the
				// keep-alive's own and not the grant's.
				next, _ := clk.Next()
				settle(t, clk, l, next)
				waitFor(t, "the first extension", func() bool { return a.Count("extend") == 1 })
				waitFor(t, "the keep-alive to sleep", func() bool { return clk.Pending() == 2 })
				confirmed := l.Deadline()
				next, _ = clk.Next()
				settle(t, clk, l, next-time.Millisecond)
				// Just before the next extension is due, a goes.
				switch fault {
				case "kill":
					a.Close()
				case "freeze":
					a.Fail("extend", "hang")
				}
				b.NotLeader(&a.Addr)
				c3.NotLeader(&a.Addr)
				faultAt := clk.Now()
				var hanging []string
				if fault == "freeze" {
					hanging = []string{a.URL}
				}
				settle(t, clk, l, election, hanging...)
				b.NotLeader(&c3.Addr)
				c3.NotLeader(nil)
				for l.Deadline().Equal(confirmed) && !isDone(l) {
					settle(t, clk, l, 5*time.Millisecond, hanging...)
				}
				if err := l.Err(); err != nil {
					t.Fatalf("lost at TTL %v after a %v failover that began just before an extension was due: %v (now %v after the fault; asked a %d, b %d, c %d)", ttl, election, err, clk.Now().Sub(faultAt), a.Count("extend"), b.Count("extend"), c3.Count("extend"))
				}
				if c3.Count("extend") == 0 {
					t.Fatal("the extension was not confirmed by the new leader")
				}
			})
		}
	}
}

// TestBudget: the keep-alive's timing for a few TTLs, exactly, and its
// promises over the whole range of TTLs the server accepts: the give-up
// point leaves the stop grace (TTL/10) and the clock allowance (TTL/100)
// before TTL; the cadence is TTL/3 or sooner, never sooner than TTL/8; and
// from 2 s up a failover allowance of 1.5 s fits between an extension's
// due time and the give-up point, room for the slowest election measured
// and one pause between rounds of retries.
func TestBudget(t *testing.T) {
	for _, tc := range []struct {
		ttl                   time.Duration
		every, giveUp, stopBy time.Duration
	}{
		{100 * time.Millisecond, 12500 * time.Microsecond, 89 * time.Millisecond, 99 * time.Millisecond},
		{time.Second, 125 * time.Millisecond, 890 * time.Millisecond, 990 * time.Millisecond},
		{2 * time.Second, 280 * time.Millisecond, 1780 * time.Millisecond, 1980 * time.Millisecond},
		{3 * time.Second, time.Second, 2670 * time.Millisecond, 2970 * time.Millisecond},
		{6 * time.Second, 2 * time.Second, 5340 * time.Millisecond, 5940 * time.Millisecond},
		{10 * time.Second, 10 * time.Second / 3, 8900 * time.Millisecond, 9900 * time.Millisecond},
		{time.Minute, 20 * time.Second, 53400 * time.Millisecond, 59400 * time.Millisecond},
	} {
		every, giveUp, stopBy := client.Budget(tc.ttl)
		if every != tc.every || giveUp != tc.giveUp || stopBy != tc.stopBy {
			t.Errorf("TTL %v: every %v, give up %v, stop by %v; want %v, %v, %v", tc.ttl, every, giveUp, stopBy, tc.every, tc.giveUp, tc.stopBy)
		}
	}
	for ttl := 100 * time.Millisecond; ttl <= 24*time.Hour; ttl += ttl/7 + time.Millisecond {
		every, giveUp, stopBy := client.Budget(ttl)
		if stopBy != ttl-ttl/100 || giveUp != stopBy-ttl/10 {
			t.Fatalf("TTL %v: give up %v, stop by %v; want TTL-TTL/100-TTL/10, TTL-TTL/100", ttl, giveUp, stopBy)
		}
		if every > ttl/3 || every < ttl/8 {
			t.Fatalf("TTL %v: extends every %v, want between TTL/8 and TTL/3", ttl, every)
		}
		if ttl >= 2*time.Second {
			if left := giveUp - every; left < client.FailoverAllowance {
				t.Fatalf("TTL %v: %v between due time and give-up, want at least %v", ttl, left, client.FailoverAllowance)
			}
			if left := giveUp - every - client.RetryDelayMax(ttl); left < election {
				t.Fatalf("TTL %v: %v for an election after one pause, want at least %v", ttl, left, election)
			}
		}
	}
}

// givesUpAt fails every extension and checks that l gives up exactly at
// want: still held one tick (1ns) before, lost at it.
func givesUpAt(clk *clock.Fake, srv *clienttest.Server, l *client.Lease, want time.Time) error {
	srv.Fail("extend", "unavailable")
	defer srv.Fail("extend", "")
	if !clk.Now().Before(want) {
		return fmt.Errorf("already at %v, past the deadline under test", clk.Now())
	}
	clk.Set(want.Add(-time.Nanosecond))
	if err := l.Err(); err != nil || isDone(l) {
		return fmt.Errorf("lost one tick before %v: %v", want, err)
	}
	clk.Set(want)
	if err := l.Err(); err == nil || !isDone(l) {
		return fmt.Errorf("still held at %v: Err %v, done %v", want, err, isDone(l))
	}
	return nil
}

// TestLeaseGivesUpOnTheTick: with every extension failing, the lease is
// lost exactly at the give-up point after the send of its last confirmed
// extension — not one tick before, and not one tick after. The check is
// proven sharp on a plant: told a give-up point one tick earlier than the
// keep-alive's (as if the keep-alive gave up one tick late), it fails.
func TestLeaseGivesUpOnTheTick(t *testing.T) {
	for _, ttl := range []time.Duration{2 * time.Second, 3 * time.Second, 6 * time.Second, 10 * time.Second} {
		for _, plant := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v/planted=%v", ttl, plant), func(t *testing.T) {
				leakCheck(t)
				clk := newFakeClock()
				srv, c := newPair(t, clk)
				sent := clk.Now()
				l, err := c.TryAcquire(context.Background(), "k", client.WithTTL(ttl))
				if err != nil {
					t.Fatal(err)
				}
				defer l.Release(context.Background())
				_, giveUp, stopBy := client.Budget(ttl)
				if !l.Deadline().Equal(sent.Add(giveUp)) || !l.StopBy().Equal(sent.Add(stopBy)) || !l.HeldUntil().Equal(sent.Add(ttl)) {
					t.Fatalf("deadline, stop-by, held-until %v, %v, %v after the send; want %v, %v, %v",
						l.Deadline().Sub(sent), l.StopBy().Sub(sent), l.HeldUntil().Sub(sent), giveUp, stopBy, ttl)
				}
				want := sent.Add(giveUp)
				if plant {
					want = want.Add(-time.Nanosecond)
				}
				err = givesUpAt(clk, srv, l, want)
				switch {
				case !plant && err != nil:
					t.Fatal(err)
				case plant && err == nil:
					t.Fatal("the check passed a keep-alive that gives up one tick late")
				case plant:
					t.Logf("the plant is caught: %v", err)
				}
			})
		}
	}
}

// giveUpOf and everyOf are Budget's give-up point and cadence for ttl.
func giveUpOf(ttl time.Duration) time.Duration { _, g, _ := client.Budget(ttl); return g }

func everyOf(ttl time.Duration) time.Duration { e, _, _ := client.Budget(ttl); return e }
