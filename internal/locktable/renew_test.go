package locktable

import (
	"bytes"
	"errors"
	"testing"
)

// TestRenew runs Renew on tables set up by a few calls. A refusal must
// leave the table's encoding as it was.
func TestRenew(t *testing.T) {
	cases := []struct {
		name   string
		setup  func(t *testing.T, tb *Table)
		holder string
		now    Time
		ttl    Duration
		err    error  // nil: granted
		token  uint64 // the new token when granted
	}{
		{name: "free key", setup: func(*testing.T, *Table) {}, holder: "a", now: 1, ttl: 10, err: ErrNotHeld},
		{name: "held by another", setup: acquireK("b", 0, 10), holder: "a", now: 1, ttl: 10, err: ErrNotHeld},
		{name: "live holder", setup: acquireK("a", 0, 10), holder: "a", now: 9, ttl: 5, token: 2},
		{name: "at expiry", setup: acquireK("a", 0, 10), holder: "a", now: 10, ttl: 5, err: ErrNotHeld},
		{name: "after expiry", setup: acquireK("a", 0, 10), holder: "a", now: 30, ttl: 5, err: ErrNotHeld},
		{name: "released", setup: func(t *testing.T, tb *Table) {
			acquireK("a", 0, 10)(t, tb)
			_, _ = tb.Release("k", "a", 1)
		}, holder: "a", now: 2, ttl: 5, err: ErrNotHeld},
		{name: "expired with a waiter", setup: func(t *testing.T, tb *Table) {
			acquireK("a", 0, 10)(t, tb)
			_, _, _ = tb.Wait("k", "w", 1, 10, NoDeadline)
		}, holder: "a", now: 10, ttl: 5, err: ErrNotHeld},
		{name: "zero ttl", setup: acquireK("a", 0, 10), holder: "a", now: 1, ttl: 0, err: ErrInvalidTTL},
		{name: "empty holder", setup: acquireK("a", 0, 10), holder: "", now: 1, ttl: 5, err: ErrInvalidHolder},
		// At the grant's own now: Acquire's refusal still raises MaxNow,
		// which the encoding carries.
		{name: "semaphore holder", setup: func(_ *testing.T, tb *Table) {
			_, _, _ = tb.AcquireShared("k", "a", Shared{Kind: Semaphore, Permits: 2}, 0, 10, 0, WaitLimits{})
		}, holder: "a", now: 0, ttl: 5, err: ErrKindMismatch},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tb := New()
			c.setup(t, tb)
			before, _ := tb.MarshalBinary()
			l, err := tb.Renew("k", c.holder, c.now, c.ttl)
			if c.err != nil {
				after, _ := tb.MarshalBinary()
				if !errors.Is(err, c.err) || !bytes.Equal(before, after) {
					t.Fatalf("renew: %+v %v, want %v and no change", l, err, c.err)
				}
				return
			}
			want := Lease{Key: "k", Holder: c.holder, Token: c.token, Granted: c.now, Expiry: c.now + Time(c.ttl), TTL: c.ttl}
			if err != nil || l != want {
				t.Fatalf("renew: %+v %v, want %+v", l, err, want)
			}
			if tb.IsValidToken("k", c.token-1) || !tb.Check("k", c.token, c.now) {
				t.Fatal("the renewal's token did not supersede the old one")
			}
		})
	}
}

// acquireK is a setup that grants key "k" to holder.
func acquireK(holder string, now Time, ttl Duration) func(*testing.T, *Table) {
	return func(t *testing.T, tb *Table) {
		t.Helper()
		if _, err := tb.Acquire("k", holder, now, ttl); err != nil {
			t.Fatal(err)
		}
	}
}
