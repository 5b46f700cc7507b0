package service

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/api"
)

// Every grant takes the next token of one counter shared by all keys:
// first grant 1, then one more per grant, whatever the key; a refusal
// takes none.
func TestTokensRiseByOnePerGrantAcrossKeys(t *testing.T) {
	s, _, _ := newTestService(t)
	ctx := context.Background()
	want := uint64(1)
	for _, req := range []api.AcquireRequest{
		{Key: "a", Holder: "h1", TTLMs: 60000},
		{Key: "b", Holder: "h1", TTLMs: 60000},
		{Key: "a", Holder: "h1", TTLMs: 60000}, // a renewal by re-acquire
		{Key: "c", Holder: "h2", TTLMs: 60000},
	} {
		if l := mustAcquire(t, s, req); l.Token != want {
			t.Fatalf("acquire %+v: token %d, want %d", req, l.Token, want)
		}
		want++
	}
	_, err := s.Acquire(ctx, "", api.AcquireRequest{Key: "a", Holder: "h2", TTLMs: 60000})
	e := wantCode(t, err, api.CodeHeld)
	if e.Holder != "h1" || e.RemainingMs == nil || *e.RemainingMs != 60000 {
		t.Fatalf("held refusal names %q with %v ms, want h1 with 60000", e.Holder, e.RemainingMs)
	}
	if l := mustAcquire(t, s, api.AcquireRequest{Key: "d", Holder: "h2", TTLMs: 60000}); l.Token != want {
		t.Fatalf("token after a refusal %d, want %d: a refusal took a token", l.Token, want)
	}
}

// Renew and re-acquire give the live holder a new token that supersedes
// its old one; Extend keeps the token and moves the expiry.
func TestRenewGivesANewTokenExtendKeepsIt(t *testing.T) {
	s, _, fake := newTestService(t)
	ctx := context.Background()
	first := mustAcquire(t, s, api.AcquireRequest{Key: "k", Holder: "a", TTLMs: 10000})
	if first.Token != 1 || first.TTLMs != 10000 || first.RemainingMs != 10000 {
		t.Fatalf("first grant %+v", first)
	}

	fake.Advance(4 * time.Second)
	ext, err := s.Extend(ctx, api.ExtendRequest{Key: "k", Holder: "a", Token: first.Token, TTLMs: 20000})
	if err != nil {
		t.Fatal(err)
	}
	if ext.Token != first.Token || ext.TTLMs != 20000 || ext.RemainingMs != 20000 {
		t.Fatalf("extend answered %+v; want token %d kept, 20000 ms left", ext, first.Token)
	}
	if c, _ := s.Check(ctx, "k", first.Token); !c.Valid {
		t.Fatal("the extended token is not valid")
	}

	fake.Advance(time.Second)
	ren, err := s.Renew(ctx, api.RenewRequest{Key: "k", Holder: "a", TTLMs: 10000})
	if err != nil {
		t.Fatal(err)
	}
	if ren.Token != first.Token+1 || ren.RemainingMs != 10000 {
		t.Fatalf("renew answered %+v; want a new token %d and a fresh ttl", ren, first.Token+1)
	}
	if c, _ := s.Check(ctx, "k", first.Token); c.Valid {
		t.Fatal("the token a renewal superseded is still valid")
	}
	if c, _ := s.Check(ctx, "k", ren.Token); !c.Valid {
		t.Fatal("the renewed token is not valid")
	}
	// The superseded token extends nothing.
	_, err = s.Extend(ctx, api.ExtendRequest{Key: "k", Holder: "a", Token: first.Token, TTLMs: 10000})
	wantCode(t, err, api.CodeNotHeld)

	// Another holder can neither renew nor extend it.
	_, err = s.Renew(ctx, api.RenewRequest{Key: "k", Holder: "b", TTLMs: 10000})
	wantCode(t, err, api.CodeNotHeld)
	_, err = s.Extend(ctx, api.ExtendRequest{Key: "k", Holder: "b", Token: ren.Token, TTLMs: 10000})
	wantCode(t, err, api.CodeNotHeld)

	// Once it has expired, the holder itself can neither.
	fake.Advance(10 * time.Second)
	_, err = s.Extend(ctx, api.ExtendRequest{Key: "k", Holder: "a", Token: ren.Token, TTLMs: 10000})
	wantCode(t, err, api.CodeNotHeld)
	_, err = s.Renew(ctx, api.RenewRequest{Key: "k", Holder: "a", TTLMs: 10000})
	wantCode(t, err, api.CodeNotHeld)
	if got := s.fsm.LastToken(); got != ren.Token {
		t.Fatalf("last token %d after refusals, want %d", got, ren.Token)
	}
}

// Release ends only the live holder's lease, and with a token only that
// grant; everything else answers false and changes nothing.
func TestReleaseOnlyByTheLiveHolder(t *testing.T) {
	s, _, fake := newTestService(t)
	ctx := context.Background()
	l := mustAcquire(t, s, api.AcquireRequest{Key: "k", Holder: "a", TTLMs: 5000})
	for _, req := range []api.ReleaseRequest{
		{Key: "k", Holder: "b"},                     // someone else
		{Key: "k", Holder: "b", Token: l.Token},     // someone else with the token
		{Key: "k", Holder: "a", Token: l.Token + 1}, // the holder, another grant's token
		{Key: "other", Holder: "a"},                 // a key it does not hold
	} {
		r, err := s.Release(ctx, req)
		if err != nil || r.Released {
			t.Fatalf("release %+v: %+v %v; want false", req, r, err)
		}
		if got, err := s.Get(ctx, "k"); err != nil || got.Holder != "a" || got.Token != l.Token {
			t.Fatalf("after release %+v the lease is %+v %v", req, got, err)
		}
	}
	if r, err := s.Release(ctx, api.ReleaseRequest{Key: "k", Holder: "a", Token: l.Token}); err != nil || !r.Released {
		t.Fatalf("holder's release: %+v %v", r, err)
	}
	if r, _ := s.Release(ctx, api.ReleaseRequest{Key: "k", Holder: "a"}); r.Released {
		t.Fatal("a second release answered true")
	}
	_, err := s.Get(ctx, "k")
	wantCode(t, err, api.CodeNotFound)

	// An expired lease is not released by its old holder (whether or not
	// the tick has committed its expiry yet), nor is the key's next grant.
	l = mustAcquire(t, s, api.AcquireRequest{Key: "k", Holder: "a", TTLMs: 1000})
	fake.Advance(time.Second)
	if r, _ := s.Release(ctx, api.ReleaseRequest{Key: "k", Holder: "a", Token: l.Token}); r.Released {
		t.Fatal("an expired lease was released")
	}
	b := mustAcquire(t, s, api.AcquireRequest{Key: "k", Holder: "b", TTLMs: 1000})
	if r, _ := s.Release(ctx, api.ReleaseRequest{Key: "k", Holder: "a"}); r.Released {
		t.Fatal("the old holder released the key's next grant")
	}
	if c, _ := s.Check(ctx, "k", b.Token); !c.Valid {
		t.Fatal("b's grant does not check valid")
	}
}

// Check is true while now < expiry and false from the expiry on, before
// any tick commits it; Get answers the lease and what is left of it.
func TestCheckAndGetAtTheExpiry(t *testing.T) {
	s, _, fake := newTestService(t)
	ctx := context.Background()
	l := mustAcquire(t, s, api.AcquireRequest{Key: "k", Holder: "a", TTLMs: 1000})
	fake.Advance(999 * time.Millisecond)
	if c, err := s.Check(ctx, "k", l.Token); err != nil || !c.Valid || c.Key != "k" || c.Token != l.Token {
		t.Fatalf("check 1 ms before expiry: %+v %v", c, err)
	}
	if c, _ := s.Check(ctx, "k", l.Token+1); c.Valid {
		t.Fatal("another token checks valid")
	}
	if got, err := s.Get(ctx, "k"); err != nil || got.Holder != "a" || got.Token != l.Token || got.RemainingMs != 1 || got.TTLMs != 1000 {
		t.Fatalf("get 1 ms before expiry: %+v %v", got, err)
	}
	fake.Advance(time.Millisecond)
	if c, err := s.Check(ctx, "k", l.Token); err != nil || c.Valid {
		t.Fatalf("check at the expiry: %+v %v; want false", c, err)
	}
	_, err := s.Get(ctx, "k")
	wantCode(t, err, api.CodeNotFound)
}

// List answers the live leases under a prefix in key order, a page at a
// time, expired ones left out.
func TestListPrefixOrderPagesAndExpiry(t *testing.T) {
	s, _, fake := newTestService(t)
	ctx := context.Background()
	for _, k := range []string{"jobs/c", "jobs/a", "other", "jobs/b"} {
		mustAcquire(t, s, api.AcquireRequest{Key: k, Holder: "h", TTLMs: 60000})
	}
	mustAcquire(t, s, api.AcquireRequest{Key: "jobs/short", Holder: "h", TTLMs: 1000})
	keys := func(r api.ListResponse) string {
		var ks []string
		for _, l := range r.Locks {
			ks = append(ks, l.Key)
		}
		return strings.Join(ks, ",")
	}
	r, err := s.List(ctx, "jobs/", 0)
	if err != nil || keys(r) != "jobs/a,jobs/b,jobs/c,jobs/short" {
		t.Fatalf("list jobs/: %q %v", keys(r), err)
	}
	r, _ = s.List(ctx, "jobs/", 2)
	if keys(r) != "jobs/a,jobs/b" {
		t.Fatalf("first page %q", keys(r))
	}
	r, _ = s.ListAfter(ctx, "jobs/", "jobs/b", 2)
	if keys(r) != "jobs/c,jobs/short" {
		t.Fatalf("second page %q", keys(r))
	}
	fake.Advance(time.Second)
	r, _ = s.List(ctx, "", 0)
	if keys(r) != "jobs/a,jobs/b,jobs/c,other" {
		t.Fatalf("list after jobs/short expired: %q", keys(r))
	}
	if r.Locks[0].RemainingMs != 59000 {
		t.Fatalf("listed lease %+v; want 59000 ms left", r.Locks[0])
	}
}

// Bad input is refused with invalid_argument naming the field at fault,
// before anything is proposed.
func TestValidationNamesTheField(t *testing.T) {
	s, log, _ := newTestService(t)
	ctx := context.Background()
	long := strings.Repeat("x", api.MaxKeyLen+1)
	ok := api.AcquireRequest{Key: "k", Holder: "h", TTLMs: 1000}
	with := func(f func(*api.AcquireRequest)) api.AcquireRequest { r := ok; f(&r); return r }
	cases := []struct {
		name  string
		call  func() error
		field string
	}{
		{"acquire no key", acq(s, with(func(r *api.AcquireRequest) { r.Key = "" })), "key"},
		{"acquire long key", acq(s, with(func(r *api.AcquireRequest) { r.Key = long })), "key"},
		{"acquire no holder", acq(s, with(func(r *api.AcquireRequest) { r.Holder = "" })), "holder"},
		{"acquire long holder", acq(s, with(func(r *api.AcquireRequest) { r.Holder = strings.Repeat("h", api.MaxHolderLen+1) })), "holder"},
		{"acquire ttl 0", acq(s, with(func(r *api.AcquireRequest) { r.TTLMs = 0 })), "ttl_ms"},
		{"acquire ttl below min", acq(s, with(func(r *api.AcquireRequest) { r.TTLMs = api.MinTTL.Milliseconds() - 1 })), "ttl_ms"},
		{"acquire ttl above max", acq(s, with(func(r *api.AcquireRequest) { r.TTLMs = api.MaxTTL.Milliseconds() + 1 })), "ttl_ms"},
		{"acquire negative wait", acq(s, with(func(r *api.AcquireRequest) { r.WaitMs = -1 })), "wait_ms"},
		{"acquire wait above max", acq(s, with(func(r *api.AcquireRequest) { r.WaitMs = api.MaxWait.Milliseconds() + 1 })), "wait_ms"},
		{"acquire long request id", acq(s, with(func(r *api.AcquireRequest) { r.RequestID = strings.Repeat("r", api.MaxRequestIDLen+1) })), "request_id"},
		{"acquire lock delay above max", acq(s, with(func(r *api.AcquireRequest) { r.LockDelayMs = api.MaxLockDelay.Milliseconds() + 1 })), "lock_delay_ms"},
		{"acquire negative permits", acq(s, with(func(r *api.AcquireRequest) { r.Permits = -1 })), "permits"},
		{"acquire permits and mode", acq(s, with(func(r *api.AcquireRequest) { r.Permits, r.Mode = 2, api.ModeRead })), "mode"},
		{"acquire bad mode", acq(s, with(func(r *api.AcquireRequest) { r.Mode = "exclusive" })), "mode"},
		{"acquire permits under a session", acq(s, with(func(r *api.AcquireRequest) { r.Permits, r.Session = 2, 1 })), "permits"},
		{"extend no token", func() error {
			_, err := s.Extend(ctx, api.ExtendRequest{Key: "k", Holder: "h", TTLMs: 1000})
			return err
		}, "token"},
		{"extend ttl", func() error {
			_, err := s.Extend(ctx, api.ExtendRequest{Key: "k", Holder: "h", Token: 1})
			return err
		}, "ttl_ms"},
		{"extend-batch empty", func() error {
			_, err := s.ExtendBatch(ctx, api.ExtendBatchRequest{Holder: "h", TTLMs: 1000})
			return err
		}, "leases"},
		{"extend-batch item token", func() error {
			_, err := s.ExtendBatch(ctx, api.ExtendBatchRequest{Holder: "h", TTLMs: 1000, Leases: []api.BatchItem{{Key: "k", Token: 1}, {Key: "l"}}})
			return err
		}, "leases[1].token"},
		{"renew no key", func() error {
			_, err := s.Renew(ctx, api.RenewRequest{Holder: "h", TTLMs: 1000})
			return err
		}, "key"},
		{"release no holder", func() error {
			_, err := s.Release(ctx, api.ReleaseRequest{Key: "k"})
			return err
		}, "holder"},
		{"check no key", func() error { _, err := s.Check(ctx, "", 1); return err }, "key"},
		{"get long key", func() error { _, err := s.Get(ctx, long); return err }, "key"},
		{"list long prefix", func() error { _, err := s.List(ctx, long, 0); return err }, "prefix"},
		{"list limit", func() error { _, err := s.List(ctx, "", api.MaxLimit+1); return err }, "limit"},
		{"session open ttl", func() error {
			_, err := s.OpenSession(ctx, "", api.SessionOpenRequest{Holder: "h"})
			return err
		}, "ttl_ms"},
		{"session extend no id", func() error {
			_, err := s.ExtendSession(ctx, api.SessionRequest{Holder: "h"})
			return err
		}, "id"},
		{"acquire-all no keys", func() error {
			_, err := s.AcquireAll(ctx, "", api.AcquireAllRequest{Holder: "h", TTLMs: 1000})
			return err
		}, "keys"},
		{"acquire-all empty key", func() error {
			_, err := s.AcquireAll(ctx, "", api.AcquireAllRequest{Holder: "h", TTLMs: 1000, Keys: []string{"a", ""}})
			return err
		}, "keys[1]"},
		{"acquire-all duplicate", func() error {
			_, err := s.AcquireAll(ctx, "", api.AcquireAllRequest{Holder: "h", TTLMs: 1000, Keys: []string{"a", "a"}})
			return err
		}, "keys"},
		{"watch key and prefix", func() error {
			_, err := s.Watch(ctx, api.WatchRequest{Key: "k", Prefix: "p"}, WatchScope{})
			return err
		}, "key"},
		{"watch list after", func() error {
			_, err := s.Watch(ctx, api.WatchRequest{List: true, After: &api.Revision{}}, WatchScope{})
			return err
		}, "after"},
		{"watch limit", func() error {
			_, err := s.Watch(ctx, api.WatchRequest{Limit: api.MaxWatchLimit + 1}, WatchScope{})
			return err
		}, "limit"},
	}
	before := log.AppliedIndex()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if e := wantCode(t, c.call(), api.CodeInvalid); e.Field != c.field {
				t.Fatalf("field %q (%s), want %q", e.Field, e.Message, c.field)
			}
		})
	}
	if after := log.AppliedIndex(); after != before {
		t.Fatalf("refused requests proposed %d entries", after-before)
	}
}

func acq(s *Service, req api.AcquireRequest) func() error {
	return func() error {
		_, err := s.Acquire(context.Background(), "", req)
		return err
	}
}
