package filefence

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/client/clienttest"
	"github.com/fencelock/fencelock/clock"
	"github.com/fencelock/fencelock/fence"
)

// Findings 1 and 2 of issue 25 at a file fence, with the real server: a
// forged token (2^64-1) or another key's live token raised the mark, and
// the live holder was then refused as stale, across restarts. Verifying,
// both are refused, nothing is written, and the live holder writes.
func TestVerifyingFileFenceRefusesForgedAndForeignTokens(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	srv := clienttest.NewServer(clk)
	defer srv.Close()
	c, err := client.New([]string{srv.Addr}, client.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = c.Grant(ctx, "ledger/first", "x", time.Minute, 0)
	a, _ := c.Grant(ctx, "ledger/a", "alice", time.Minute, 0) // token 2
	b, _ := c.Grant(ctx, "ledger/b", "bob", time.Minute, 0)   // token 3

	// Unverified, as before: the forged token fences the resource for good.
	plain := open(t, t.TempDir())
	if err := plain.Admit(ctx, "a", math.MaxUint64, nil); err != nil {
		t.Fatal(err)
	}
	if err := plain.Admit(ctx, "a", a.Token, nil); !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("unverified: %v", err)
	}

	dir := t.TempDir()
	v := &fence.Verification{Verifier: client.NewVerifier(c), Key: func(r string) string { return "ledger/" + r }}
	f, err := Open(dir, WithVerification(v))
	if err != nil {
		t.Fatal(err)
	}
	ran := false
	effect := func(context.Context) error { ran = true; return nil }
	if err := f.Admit(ctx, "a", math.MaxUint64, effect); !errors.Is(err, fence.ErrUnverifiedToken) || ran {
		t.Fatalf("forged token: %v (effect ran %v)", err, ran)
	}
	if err := f.Admit(ctx, "a", b.Token, effect); !errors.Is(err, fence.ErrUnverifiedToken) || ran {
		t.Fatalf("b's live token on a's resource: %v", err)
	}
	if err := f.Admit(fence.WithKey(ctx, "ledger/b"), "a", b.Token, effect); !errors.Is(err, fence.ErrWrongKey) || ran {
		t.Fatalf("b's live token naming b on a's resource: %v", err)
	}
	if m := f.Marks(); len(m) != 0 {
		t.Fatalf("refused tokens left marks %+v", m)
	}
	if err := f.Admit(ctx, "a", a.Token, effect); err != nil || !ran {
		t.Fatalf("a's live token: %v", err)
	}
	f.Close()
	g, err := Open(dir, WithVerification(v))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if m := g.Marks(); len(m) != 1 || m[0].Highest != a.Token || m[0].Key != "ledger/a" {
		t.Fatalf("after restart %+v", m)
	}
}
