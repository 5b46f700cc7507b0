package redisfence_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/client/clienttest"
	"github.com/fencelock/fencelock/clock"
	"github.com/fencelock/fencelock/fence"
	"github.com/fencelock/fencelock/fence/redisfence"
)

// grants is a real in-process fencelock server with three live leases:
// ledger/first (token 1), ledger/a (2) and ledger/b (3).
func grants(t *testing.T) (c *client.Client, a, b client.Lock) {
	t.Helper()
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	srv := clienttest.NewServer(clk)
	t.Cleanup(srv.Close)
	c, err := client.New([]string{srv.Addr}, client.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	for _, k := range []string{"ledger/first", "ledger/a", "ledger/b"} {
		l, err := c.Grant(ctx, k, "h-"+k, time.Minute, 0)
		if err != nil {
			t.Fatal(err)
		}
		a, b = b, l
	}
	return c, a, b
}

// Forged tokens (the service's highest + 1000, 2^63-1, 2^64-1) and
// another key's live token are refused by a verifying fence against the
// real server and raise no mark; the live holder writes and its key is
// recorded.
func TestVerifyingFenceRefusesForgedAndForeignTokens(t *testing.T) {
	c, a, b := grants(t)
	rc, _, r := newFence(t)
	k := "{" + r + "}:v"
	v := &fence.Verification{Verifier: client.NewVerifier(c), Key: func(string) string { return "ledger/a" }}
	f := redisfence.New(rc, redisfence.WithVerification(v))
	for _, s := range []struct {
		name  string
		ctx   context.Context
		token uint64
		want  error // nil: any refusal
	}{
		{"never issued (highest + 1000)", ctx, b.Token + 1000, fence.ErrUnverifiedToken},
		{"2^63-1", ctx, math.MaxInt64, fence.ErrUnverifiedToken},
		{"2^64-1", ctx, math.MaxUint64, nil},
		{"b's live token", ctx, b.Token, fence.ErrUnverifiedToken},
		{"b's live token, naming b", fence.WithKey(ctx, "ledger/b"), b.Token, fence.ErrWrongKey},
	} {
		_, err := f.Write(s.ctx, r, s.token, redisfence.Set(k, "forged"))
		if err == nil || (s.want != nil && !errors.Is(err, s.want)) {
			t.Fatalf("%s: %v, want %v", s.name, err, s.want)
		}
		if m := markOf(t, f, r); m.Token != 0 || get(t, rc, k) != "<none>" {
			t.Fatalf("%s: mark %+v value %q", s.name, m, get(t, rc, k))
		}
	}
	if _, err := f.Write(ctx, r, a.Token, redisfence.Set(k, "alice")); err != nil {
		t.Fatal(err)
	}
	for _, tok := range []uint64{b.Token + 1000, math.MaxInt64} {
		if _, err := f.Write(ctx, r, tok, redisfence.Set(k, "forged")); !errors.Is(err, fence.ErrUnverifiedToken) {
			t.Fatalf("token %d over a's mark: %v", tok, err)
		}
	}
	if m := markOf(t, f, r); m.Token != a.Token || m.Key != "ledger/a" || get(t, rc, k) != "alice" {
		t.Fatalf("mark %+v value %q", m, get(t, rc, k))
	}
}

type verifierFunc func(ctx context.Context, key string, token uint64) error

func (f verifierFunc) Verify(ctx context.Context, key string, token uint64) error {
	return f(ctx, key, token)
}

// No binding on first use unless asked (issue 43's first-binding
// hijack): a resource the configuration binds to no key is refused,
// asking nothing, as fence.ErrUnbound; with BindOnFirstUse the first
// verified request's key binds it, and OnBind is told.
func TestNoBindingOnFirstUseUnlessAsked(t *testing.T) {
	rc, _, r := newFence(t)
	k := "{" + r + "}:v"
	named := fence.WithKey(ctx, "jobs/b")
	var asked atomic.Int32
	verifier := verifierFunc(func(context.Context, string, uint64) error { asked.Add(1); return nil })
	unbound := redisfence.New(rc, redisfence.WithVerification(&fence.Verification{Verifier: verifier}))
	if _, err := unbound.Write(named, r, 7, redisfence.Set(k, "b")); !errors.Is(err, fence.ErrUnbound) || asked.Load() != 0 {
		t.Fatalf("err %v, asked %d", err, asked.Load())
	}
	if m := markOf(t, unbound, r); m.Token != 0 || get(t, rc, k) != "<none>" {
		t.Fatalf("mark %+v", m)
	}
	var bound []string
	f := redisfence.New(rc, redisfence.WithVerification(&fence.Verification{
		Verifier: verifier, BindOnFirstUse: true,
		OnBind: func(resource, key string, token uint64) {
			bound = append(bound, fmt.Sprint(resource, " ", key, " ", token))
		},
	}))
	if _, err := f.Write(named, r, 7, redisfence.Set(k, "b")); err != nil {
		t.Fatal(err)
	}
	if m := markOf(t, f, r); m.Key != "jobs/b" || m.Token != 7 || fmt.Sprint(bound) != "["+r+" jobs/b 7]" {
		t.Fatalf("mark %+v, OnBind told %q", m, bound)
	}
	if _, err := f.Write(fence.WithKey(ctx, "jobs/c"), r, 8, redisfence.Set(k, "c")); !errors.Is(err, fence.ErrWrongKey) || asked.Load() != 1 {
		t.Fatalf("err %v, asked %d", err, asked.Load())
	}
	// The recorded binding holds at a fence that binds nothing by
	// configuration: the holder writes on, unasked.
	if _, err := unbound.Write(ctx, r, 7, redisfence.Set(k, "b2")); err != nil || asked.Load() != 1 {
		t.Fatalf("the holder at a fence without configuration: %v, asked %d", err, asked.Load())
	}
}

// A stalled lock service: a new token's question hangs; it is asked
// before the script, so the current holder (token equal to the mark)
// writes on, never asked about; past Verification.Timeout the new token
// is refused as fence.ErrUnavailable (a *fence.UnavailableError naming
// the bound), having written nothing.
func TestStalledLockServiceDoesNotStallTheResource(t *testing.T) {
	rc, _, r := newFence(t)
	k := "{" + r + "}:n"
	var asked atomic.Int32
	entered := make(chan uint64, 4)
	verifier := verifierFunc(func(ctx context.Context, key string, token uint64) error {
		asked.Add(1)
		if token == 5 {
			return nil
		}
		entered <- token
		<-ctx.Done()
		return ctx.Err()
	})
	v := &fence.Verification{Key: func(string) string { return "acct/lock" }, Verifier: verifier, Timeout: time.Hour}
	f := redisfence.New(rc, redisfence.WithVerification(v))
	if _, err := f.Write(ctx, r, 5, redisfence.IncrBy(k, 1)); err != nil {
		t.Fatal(err)
	}
	newCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { _, err := f.Write(newCtx, r, 6, redisfence.Set(k, "six")); done <- err }()
	if tok := <-entered; tok != 6 {
		t.Fatalf("asked about %d", tok)
	}
	for i := range 3 {
		if _, err := f.Write(ctx, r, 5, redisfence.IncrBy(k, 1)); err != nil {
			t.Fatalf("write %d of the current holder while the service stalls: %v", i, err)
		}
	}
	if asked.Load() != 2 {
		t.Fatalf("asked %d times, want 2", asked.Load())
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("the new token, its caller gone: %v", err)
	}
	short := redisfence.New(rc, redisfence.WithVerification(&fence.Verification{Key: v.Key, Verifier: verifier, Timeout: 50 * time.Millisecond}))
	go func() { <-entered }()
	_, err := short.Write(ctx, r, 7, redisfence.Set(k, "seven"))
	var ue *fence.UnavailableError
	if !errors.Is(err, fence.ErrUnavailable) || !errors.As(err, &ue) || ue.Timeout != 50*time.Millisecond || ue.Token != 7 {
		t.Fatalf("past the verify timeout: %v", err)
	}
	if m := markOf(t, f, r); m.Token != 5 || get(t, rc, k) != "4" {
		t.Fatalf("mark %+v value %q", m, get(t, rc, k))
	}
}

// The script re-checks the mark the answer was about: a binding made
// while a new token was being asked about is refused, Confirm given the
// mark the script found; a mark lowered below a current holder's token
// (an operator's reset) is asked about again, not waved through.
func TestMarkMovedWhileVerifying(t *testing.T) {
	rc, _, r := newFence(t)
	var hook func()
	var asked []uint64
	v := &fence.Verification{
		Key: func(string) string { return "acct/lock" },
		Verifier: verifierFunc(func(_ context.Context, _ string, token uint64) error {
			asked = append(asked, token)
			if hook != nil {
				h := hook
				hook = nil
				h()
			}
			return nil
		}),
	}
	f := redisfence.New(rc, redisfence.WithVerification(v))
	hook = func() {
		if _, err := rc.Do(ctx, "HSET", f.MarkKey(r), "token", "1", "write", "1", "key", "jobs/x"); err != nil {
			t.Error(err)
		}
	}
	_, err := f.Write(ctx, r, 9)
	var we *fence.WrongKeyError
	if !errors.As(err, &we) || we.Bound != "jobs/x" || we.Key != "acct/lock" {
		t.Fatalf("a binding made while asking: %v", err)
	}
	if m := markOf(t, f, r); m.Token != 1 {
		t.Fatalf("mark %+v", m)
	}
	if _, err := rc.Do(ctx, "HSET", f.MarkKey(r), "key", "acct/lock"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(ctx, r, 1); err != nil || len(asked) != 1 {
		t.Fatalf("the holder of the mark: %v, asked about %v", err, asked)
	}
	if _, err := rc.Do(ctx, "HSET", f.MarkKey(r), "token", "0", "write", "0"); err != nil { // the reset
		t.Fatal(err)
	}
	if _, err := f.Write(ctx, r, 1); err != nil || len(asked) != 2 || asked[1] != 1 {
		t.Fatalf("after a reset below the holder's token: %v, asked about %v", err, asked)
	}
}

// afterRead runs hook once after the fence's first read of a mark.
type afterRead struct {
	redisfence.Doer
	hook func()
}

func (d *afterRead) Do(ctx context.Context, args ...string) (any, error) {
	reply, err := d.Doer.Do(ctx, args...)
	if args[0] == "HMGET" && d.hook != nil {
		h := d.hook
		d.hook = nil
		h()
	}
	return reply, err
}

// The current holder is not asked about; if the mark is lowered below
// its token between the fence's read and the script (an operator's
// reset), the script answers "moved" and the fence reads again and asks.
func TestMarkLoweredBeforeTheScript(t *testing.T) {
	rc, _, r := newFence(t)
	var asked []uint64
	v := &fence.Verification{
		Key: func(string) string { return "acct/lock" },
		Verifier: verifierFunc(func(_ context.Context, _ string, token uint64) error {
			asked = append(asked, token)
			return nil
		}),
	}
	d := &afterRead{Doer: rc}
	f := redisfence.New(d, redisfence.WithVerification(v))
	if _, err := f.Write(ctx, r, 4); err != nil || len(asked) != 1 {
		t.Fatalf("%v, asked %v", err, asked)
	}
	d.hook = func() {
		if _, err := rc.Do(ctx, "HSET", f.MarkKey(r), "token", "2", "write", "2"); err != nil {
			t.Error(err)
		}
	}
	if _, err := f.Write(ctx, r, 4); err != nil || len(asked) != 2 || asked[1] != 4 {
		t.Fatalf("%v, asked %v", err, asked)
	}
	if m := markOf(t, f, r); m.Token != 4 {
		t.Fatalf("mark %+v", m)
	}
}

// A binding to the same key made while a new token was being asked about
// is covered by the answer: the script answers "moved", Confirm on the
// mark it found accepts, and the fence goes round once more, the token
// raising the mark.
func TestSameBindingWhileVerifying(t *testing.T) {
	rc, _, r := newFence(t)
	var hook func()
	v := &fence.Verification{
		Key: func(string) string { return "acct/lock" },
		Verifier: verifierFunc(func(context.Context, string, uint64) error {
			if h := hook; h != nil {
				hook = nil
				h()
			}
			return nil
		}),
	}
	f := redisfence.New(rc, redisfence.WithVerification(v))
	hook = func() {
		if _, err := rc.Do(ctx, "HSET", f.MarkKey(r), "token", "3", "write", "3", "key", "acct/lock"); err != nil {
			t.Error(err)
		}
	}
	if _, err := f.Write(ctx, r, 9); err != nil {
		t.Fatal(err)
	}
	if m := markOf(t, f, r); m.Token != 9 || m.Key != "acct/lock" {
		t.Fatalf("mark %+v", m)
	}
}
