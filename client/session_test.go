package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencelock/fencelock/client"
)

// One session keeps many locks with one extend per TTL/3 and one
// goroutine; Close releases them all and waits for the goroutine.
func TestSessionOneKeepAliveForManyLocks(t *testing.T) {
	leakCheck(t)
	clk := newFakeClock()
	srv, c := newPair(t, clk)
	ctx := context.Background()
	s, err := client.NewSession(ctx, c, client.WithSessionTTL(ttl), client.WithSessionHolder("svc"))
	if err != nil {
		t.Fatal(err)
	}
	var locks []*client.SessionLock
	for _, k := range []string{"a", "b", "c"} {
		l, err := s.TryAcquire(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		locks = append(locks, l)
	}
	more, err := s.AcquireAll(ctx, []string{"d", "e"})
	if err != nil || len(more) != 2 || more[1].Token() != 5 {
		t.Fatalf("AcquireAll: %v %v", more, err)
	}
	locks = append(locks, more...)
	lastSent := clk.Now()
	// At rest: the session's deadline and its keep-alive's sleep. The
	// locks add no timer and no goroutine.
	waitFor(t, "the keep-alive to sleep", func() bool { return clk.Pending() == 2 })
	for i := 1; i <= 4; i++ {
		next, _ := clk.Next()
		if since, every := clk.Now().Add(next).Sub(lastSent), everyOf(ttl); since < every-every/10 || since > every {
			t.Fatalf("cycle %d: next extend %v after the last confirmed send, want %v less up to 10%%", i, since, every)
		}
		clk.Advance(next)
		lastSent = clk.Now()
		waitFor(t, "the extend", func() bool { return srv.Count("session/extend") == i })
		waitFor(t, "the confirmation", func() bool { return s.Deadline().Equal(lastSent.Add(giveUpOf(ttl))) })
		waitFor(t, "the keep-alive to sleep", func() bool { return clk.Pending() == 2 })
	}
	if srv.Count("extend") != 0 || srv.Count("extend-batch") != 0 {
		t.Fatal("a lock under the session was extended on its own")
	}
	for _, k := range []string{"a", "e"} {
		if h, _, ok := srv.Holder(k); !ok || h != "svc" {
			t.Fatalf("%s after %v: %q %v", k, 4*ttl/3, h, ok)
		}
	}
	if err := locks[0].Release(ctx); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(context.Cause(locks[0].Context()), client.ErrReleased) || s.Err() != nil {
		t.Fatal("releasing one lock must end that lock only")
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for _, l := range locks[1:] {
		if !errors.Is(context.Cause(l.Context()), client.ErrSessionClosed) {
			t.Fatalf("%s: cause %v, want ErrSessionClosed", l.Key(), context.Cause(l.Context()))
		}
		if _, _, ok := srv.Holder(l.Key()); ok {
			t.Fatalf("%s still held after Close", l.Key())
		}
	}
	if err := s.Close(ctx); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := s.TryAcquire(ctx, "z"); !errors.Is(err, client.ErrSessionClosed) {
		t.Fatalf("acquire under a closed session: %v", err)
	}
}

// The session stops safely: lost exactly at the give-up point after the
// send of the last confirmed extend, and every lock's context ends with the
// same cause.
func TestSessionLostAtGiveUp(t *testing.T) {
	leakCheck(t)
	clk := newFakeClock()
	srv, c := newPair(t, clk)
	ctx := context.Background()
	s, err := client.NewSession(ctx, c, client.WithSessionTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	sent := clk.Now()
	l, err := s.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	srv.Fail("session/extend", "unavailable")
	clk.Advance(ttl/3 + ttl/30)
	waitFor(t, "a failed extend", func() bool { return s.LastErr() != nil })
	clk.Advance(sent.Add(giveUpOf(ttl)).Sub(clk.Now()) - time.Millisecond)
	if s.Err() != nil {
		t.Fatalf("lost before the deadline: %v", s.Err())
	}
	clk.Advance(time.Millisecond)
	err = s.Err()
	var se *client.SessionLostError
	if !errors.Is(err, client.ErrSessionLost) || !errors.Is(err, client.ErrLeaseLost) || !errors.Is(err, client.ErrUnavailable) ||
		!errors.As(err, &se) || se.ID != s.ID() {
		t.Fatalf("Err = %v", err)
	}
	select {
	case <-l.Done():
	default:
		t.Fatal("the lock's context outlived its session")
	}
	if !errors.Is(context.Cause(l.Context()), client.ErrSessionLost) {
		t.Fatalf("lock cause %v", context.Cause(l.Context()))
	}
	srv.Fail("session/extend", "")
	if err := s.Close(ctx); !errors.Is(err, client.ErrSessionLost) {
		t.Fatalf("Close after loss = %v, want the loss", err)
	}
}

// The server ended the session (its extend is refused): lost at once.
func TestSessionRefusedExtend(t *testing.T) {
	leakCheck(t)
	clk := newFakeClock()
	srv, c := newPair(t, clk)
	s, err := client.NewSession(context.Background(), c, client.WithSessionTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	srv.Fail("session/extend", "no_session")
	clk.Advance(ttl/3 + ttl/30)
	waitFor(t, "the loss", func() bool { return s.Err() != nil })
	if err := s.Err(); !errors.Is(err, client.ErrSessionLost) || !errors.Is(err, client.ErrNoSession) {
		t.Fatalf("Err = %v", err)
	}
	if !clk.Now().Before(s.Deadline()) {
		t.Fatal("a refusal should end the session before its deadline")
	}
	srv.Fail("session/extend", "")
	_ = s.Close(context.Background())
}

// A waiter under a session is granted under it when the key frees.
func TestSessionAcquireWaits(t *testing.T) {
	leakCheck(t)
	clk := newFakeClock()
	srv, c := newPair(t, clk)
	ctx := context.Background()
	if _, err := c.Grant(ctx, "k", "other", ttl, 0); err != nil {
		t.Fatal(err)
	}
	s, err := client.NewSession(ctx, c, client.WithSessionTTL(10*ttl), client.WithSessionHolder("svc"))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	var l *client.SessionLock
	go func() {
		var err error
		l, err = s.Acquire(ctx, "k")
		got <- err
	}()
	waitFor(t, "svc to queue", func() bool { return len(srv.Waiters("k")) == 1 })
	clk.Advance(ttl)
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if h, tok, ok := srv.Holder("k"); !ok || h != "svc" || tok != l.Token() {
		t.Fatalf("k: %q %d %v", h, tok, ok)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// Multi-key acquire is all or nothing; lock-delay refusals match their
// sentinel.
func TestClientAcquireAllAndLockDelay(t *testing.T) {
	leakCheck(t)
	clk := newFakeClock()
	srv, c := newPair(t, clk)
	ctx := context.Background()
	if _, err := c.Grant(ctx, "b", "other", ttl, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := c.AcquireAll(ctx, []string{"a", "b"}, "me", ttl, client.GrantOptions{}); !errors.Is(err, client.ErrHeld) {
		t.Fatalf("AcquireAll over a held key: %v", err)
	}
	if _, _, ok := srv.Holder("a"); ok {
		t.Fatal("a refused AcquireAll left a held")
	}
	ls, err := c.AcquireAll(ctx, []string{"a", "c"}, "me", ttl, client.GrantOptions{LockDelay: 5 * time.Second})
	if err != nil || len(ls) != 2 || ls[0].Token+1 != ls[1].Token {
		t.Fatalf("AcquireAll: %v %v", ls, err)
	}
	clk.Advance(ttl) // a and c expire: lock-delay starts
	waitFor(t, "the expiry", func() bool { _, _, ok := srv.Holder("a"); return !ok })
	_, err = c.Grant(ctx, "a", "next", ttl, 0)
	var ae *client.APIError
	if !errors.Is(err, client.ErrLockDelay) || !errors.As(err, &ae) {
		t.Fatalf("grant in the lock-delay: %v", err)
	}
}

// A multi-key acquire with RetryFor tries again, on the client's clock,
// until every key is free; it never holds some keys meanwhile.
func TestClientAcquireAllRetries(t *testing.T) {
	leakCheck(t)
	clk := newFakeClock()
	srv, c := newPair(t, clk)
	ctx := context.Background()
	if _, err := c.Grant(ctx, "b", "other", ttl, 0); err != nil {
		t.Fatal(err)
	}
	type res struct {
		ls  []client.Lock
		err error
	}
	done := make(chan res, 1)
	go func() {
		ls, err := c.AcquireAll(ctx, []string{"a", "b"}, "me", ttl, client.GrantOptions{RetryFor: 2 * ttl})
		done <- res{ls, err}
	}()
	waitFor(t, "a first refusal", func() bool { return srv.Count("acquire-all") >= 1 })
	for {
		if ha, _, ok := srv.Holder("a"); ok && ha == "me" {
			if hb, _, _ := srv.Holder("b"); hb != "me" {
				t.Fatal("a held while b is not: a partial hold")
			}
		}
		clk.Advance(50 * time.Millisecond)
		select {
		case r := <-done:
			if r.err != nil || len(r.ls) != 2 {
				t.Fatalf("AcquireAll: %v %v", r.ls, r.err)
			}
			if srv.Count("acquire-all") < 2 {
				t.Fatal("granted without a retry")
			}
			return
		case <-time.After(time.Millisecond):
		}
	}
}
