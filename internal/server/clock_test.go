package server

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/fencelock/fencelock/clock"
)

// fakeClockServer is a single in-memory node whose lease time is a fake
// clock: tests advance it instead of sleeping.
func fakeClockServer(t *testing.T) (*testServer, *clock.Fake) {
	t.Helper()
	fake := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	cfg := fastConfig("")
	cfg.Clock = fake
	// Ticks are spaced on the fake clock too: 1ns lets a waiter be
	// granted the moment the lease before it expires.
	cfg.MinTickInterval = time.Nanosecond
	return startServer(t, cfg), fake
}

// queued reports whether holder has a place in key's queue.
func (ts *testServer) queued(key, holder string) bool {
	return slices.Contains(ts.Waiters(key), holder)
}

func TestFakeClockExpiresALeaseAtItsTTL(t *testing.T) {
	ts, fake := fakeClockServer(t)
	first := ts.post("/v1/acquire", `{"key":"k","holder":"a","ttl_ms":10000}`)
	if first.status != 200 {
		t.Fatalf("acquire: %d %v", first.status, first.body)
	}
	answered := make(chan answer, 1)
	go func() {
		answered <- ts.do(context.Background(), "POST", "/v1/acquire",
			`{"key":"k","holder":"b","ttl_ms":10000,"wait_ms":60000}`)
	}()
	eventually(t, "b queued", func() bool { return ts.queued("k", "b") })

	fake.Advance(10*time.Second - time.Nanosecond)
	if g := ts.get("/v1/lock?key=k"); g.status != 200 || g.body["holder"] != "a" {
		t.Fatalf("1ns before expiry: %d %v, want a's lease", g.status, g.body)
	}
	if !ts.queued("k", "b") {
		t.Fatal("b left the queue before a's lease expired")
	}
	select {
	case a := <-answered:
		t.Fatalf("b answered before a's lease expired: %d %v", a.status, a.body)
	default:
	}

	fake.Advance(time.Nanosecond)
	if g := ts.get("/v1/lock?key=k"); g.status == 200 && g.body["holder"] == "a" {
		t.Fatalf("at expiry Get still reports a's lease: %v", g.body)
	}
	a := <-answered
	if a.status != 200 || a.body["holder"] != "b" || num(a, "token") <= num(first, "token") {
		t.Fatalf("waiter after expiry: %d %v", a.status, a.body)
	}
	if a.body["ttl_ms"] != float64(10000) || a.body["remaining_ms"] != float64(10000) {
		t.Fatalf("waiter's lease measured on the wrong clock: %v", a.body)
	}
}

// racingClock is a fake clock that moves on by jump while the server
// arms a timer for the instant want: the worst a test's Advance can do.
type racingClock struct {
	*clock.Fake
	want   time.Time
	jump   time.Duration
	jumped chan struct{}
}

func (c *racingClock) race(t time.Time) {
	if t.Equal(c.want) {
		select {
		case <-c.jumped:
		default:
			c.Advance(c.jump)
			close(c.jumped)
		}
	}
}

func (c *racingClock) AfterFunc(d time.Duration, f func()) Timer {
	t := c.Now().Add(d)
	c.race(t)
	return c.Fake.AfterFunc(d, f)
}

func (c *racingClock) AtFunc(t time.Time, f func()) Timer {
	c.race(t)
	return c.Fake.AtFunc(t, f)
}

// The expiry timer fires at the lease's expiry even when the clock moves
// between the server's reading it and arming the timer.
func TestExpiryTimerIsNotLateWhenTheClockMovesWhileItIsArmed(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	rc := &racingClock{Fake: clock.NewFake(start), want: start.Add(time.Second), jump: 500 * time.Millisecond, jumped: make(chan struct{})}
	cfg := fastConfig("")
	cfg.Clock = rc
	cfg.MinTickInterval = time.Nanosecond
	cfg.ClockCheckpoint = time.Hour // only the lease's expiry is due
	ts := startServer(t, cfg)
	if a := ts.post("/v1/acquire", `{"key":"k","holder":"a","ttl_ms":1000}`); a.status != 200 {
		t.Fatalf("acquire: %d %v", a.status, a.body)
	}
	<-rc.jumped
	rc.Advance(500 * time.Millisecond) // now at the expiry
	eventually(t, "the expiry tick", func() bool {
		return ts.metric("fencelock_lease_ends_total", "reason", "expired") == 1
	})
}
