package client_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/clock"
	"github.com/fencelock/fencelock/fence"
)

// Findings 1 and 2 of issue 25, at a Guard verifying with the real
// server: a made-up token (2^64-1) or another key's live token raised the
// mark and every real holder was then refused as stale.
func TestVerifierRefusesForgedAndForeignTokens(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	srv, c := newPair(t, clk)
	if _, err := c.Grant(ctx, "locks/first", "x", time.Minute, 0); err != nil {
		t.Fatal(err)
	}
	a, err := c.Grant(ctx, "locks/a", "alice", time.Minute, 0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Grant(ctx, "locks/b", "bob", time.Minute, 0)
	if err != nil {
		t.Fatal(err)
	}
	g := fence.NewGuard(fence.WithVerification(&fence.Verification{
		Verifier: client.NewVerifier(c),
		Key:      func(resource string) string { return "locks/" + strings.TrimPrefix(resource, "res/") },
	}))

	var ue *fence.UnverifiedTokenError
	err = g.Admit(ctx, "res/a", math.MaxUint64, nil)
	if !errors.As(err, &ue) || ue.Issued != b.Token || !strings.Contains(err.Error(), "never issued") ||
		!strings.Contains(err.Error(), "18446744073709551615") || !strings.Contains(err.Error(), `"locks/a"`) {
		t.Fatalf("forged token: %v", err)
	}
	err = g.Admit(ctx, "res/a", b.Token, nil)
	if !errors.As(err, &ue) || ue.Current != a.Token || !strings.Contains(err.Error(), "not a live grant of lock key \"locks/a\"") {
		t.Fatalf("b's live token on a's resource: %v", err)
	}
	var wk *fence.WrongKeyError
	err = g.Admit(fence.WithKey(ctx, "locks/b"), "res/a", b.Token, nil)
	if !errors.As(err, &wk) || wk.Bound != "locks/a" || wk.Key != "locks/b" ||
		!strings.Contains(err.Error(), `"locks/a"`) || !strings.Contains(err.Error(), `"locks/b"`) {
		t.Fatalf("b's token naming b on a's resource: %v", err)
	}
	if h := g.Highest("res/a"); h != 0 {
		t.Fatalf("a refused token raised the mark to %d", h)
	}
	// a's live holder is not refused as stale, as it was before.
	checks := srv.Count("check")
	if err := g.Admit(ctx, "res/a", a.Token, nil); err != nil {
		t.Fatalf("a's live token: %v", err)
	}
	if n := srv.Count("check") - checks; n != 1 {
		t.Fatalf("a new token took %d checks, want 1", n)
	}
	for range 3 {
		if err := g.Admit(ctx, "res/a", a.Token, nil); err != nil {
			t.Fatal(err)
		}
	}
	if n := srv.Count("check") - checks; n != 1 {
		t.Fatalf("equal tokens were checked again: %d checks in all, want 1", n)
	}
	// A stale token is refused without asking.
	if err := g.Admit(ctx, "res/a", a.Token-1, nil); !errors.Is(err, fence.ErrStaleToken) || srv.Count("check")-checks != 1 {
		t.Fatalf("stale token: %v, %d checks", err, srv.Count("check")-checks)
	}
}

// Bound on first use (BindOnFirstUse), a resource takes the key of its
// first verified token; a later token of another key is refused naming
// both.
func TestVerifierRecordsTheBinding(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	srv, c := newPair(t, clk)
	g := fence.NewGuard(fence.WithVerification(&fence.Verification{Verifier: client.NewVerifier(c), BindOnFirstUse: true}))
	a, _ := c.Grant(ctx, "locks/a", "alice", time.Minute, 0)
	if err := g.Admit(ctx, "res", a.Token, nil); !errors.Is(err, fence.ErrNoKey) {
		t.Fatalf("no key named, none bound: %v", err)
	}
	if err := g.Admit(fence.WithKey(ctx, "locks/a"), "res", a.Token, nil); err != nil {
		t.Fatal(err)
	}
	b, _ := c.Grant(ctx, "locks/b", "bob", time.Minute, 0)
	var wk *fence.WrongKeyError
	if err := g.Admit(fence.WithKey(ctx, "locks/b"), "res", b.Token, nil); !errors.As(err, &wk) || wk.Bound != "locks/a" || wk.Key != "locks/b" {
		t.Fatalf("b's live token on a resource bound to a: %v", err)
	}
	// Naming no key, b's token is checked as locks/a's, and is not one.
	if err := g.Admit(ctx, "res", b.Token, nil); !errors.Is(err, fence.ErrUnverifiedToken) {
		t.Fatalf("b's token, no key named: %v", err)
	}
	// a's next grant is admitted; when the cluster cannot be asked, a new
	// token is neither honoured nor judged stale or forged.
	a2, _ := c.Grant(ctx, "locks/a", "alice", time.Minute, 0)
	srv.Fail("check", "drop")
	// The client retries a dropped call until its context ends; how long
	// that takes decides nothing here.
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	err := g.Admit(cctx, "res", a2.Token, nil)
	if err == nil || errors.Is(err, fence.ErrUnverifiedToken) || errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("cluster unreachable: %v", err)
	}
	if h := g.Highest("res"); h != a.Token {
		t.Fatalf("mark %d, want %d", h, a.Token)
	}
	if err := g.Admit(ctx, "res", a.Token, nil); err != nil {
		t.Fatalf("the current token needs no check: %v", err)
	}
	srv.Fail("check", "")
	if err := g.Admit(ctx, "res", a2.Token, nil); err != nil {
		t.Fatal(err)
	}
}
