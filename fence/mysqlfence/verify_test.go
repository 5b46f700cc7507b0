package mysqlfence_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/client/clienttest"
	"github.com/fencelock/fencelock/clock"
	"github.com/fencelock/fencelock/fence"
	"github.com/fencelock/fencelock/fence/mysqlfence"
)

// grants is a real in-process fencelock server with three live leases:
// ledger/first (token 1), ledger/a (2) and ledger/b (3).
func grants(t *testing.T) (c *client.Client, a, b client.Lock) {
	t.Helper()
	ctx := context.Background()
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
// real server, at both isolation levels, and raise no mark; the live
// holder writes, and its key is recorded.
func TestVerifyingFenceRefusesForgedAndForeignTokens(t *testing.T) {
	c, a, b := grants(t)
	ctx := context.Background()
	for _, l := range levels {
		t.Run(l.name, func(t *testing.T) {
			db := newDB(t)
			v := &fence.Verification{Verifier: client.NewVerifier(c), Key: func(string) string { return "ledger/a" }}
			f := mysqlfence.New(db, mysqlfence.WithTxOptions(l.opts), mysqlfence.WithVerification(v))
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
				err := f.Admit(s.ctx, "acct", s.token, write("acct", "forged", s.token))
				if err == nil || (s.want != nil && !errors.Is(err, s.want)) {
					t.Fatalf("%s: %v, want %v", s.name, err, s.want)
				}
				if m, _ := stored(t, db, "acct"); m != 0 || value(t, db, "acct") != "<none>" {
					t.Fatalf("%s: mark %d, value %q", s.name, m, value(t, db, "acct"))
				}
			}
			if err := f.Admit(ctx, "acct", a.Token, write("acct", "alice", a.Token)); err != nil {
				t.Fatal(err)
			}
			var key string
			if err := db.QueryRow(`SELECT lock_key FROM fence WHERE resource = 'acct'`).Scan(&key); err != nil || key != "ledger/a" {
				t.Fatalf("lock_key %q %v", key, err)
			}
			// The forged ones again, now that the mark is a's.
			for _, tok := range []uint64{b.Token + 1000, math.MaxInt64} {
				if err := f.Admit(ctx, "acct", tok, nil); !errors.Is(err, fence.ErrUnverifiedToken) {
					t.Fatalf("token %d over a's mark: %v", tok, err)
				}
			}
			if m, _ := stored(t, db, "acct"); m != int64(a.Token) || value(t, db, "acct") != "alice" {
				t.Fatalf("mark %d value %q", m, value(t, db, "acct"))
			}
		})
	}
}

// verifierFunc is a fence.Verifier made of a function.
type verifierFunc func(ctx context.Context, key string, token uint64) error

func (f verifierFunc) Verify(ctx context.Context, key string, token uint64) error {
	return f(ctx, key, token)
}

// Issue 43's first-binding hijack: with no configured key, the first live
// token naming its key bound the resource to it. Refused now, asking
// nothing, as fence.ErrUnbound (409 unbound_resource behind Middleware),
// unless the Verification says BindOnFirstUse; then the binding is told
// to OnBind.
func TestNoBindingOnFirstUseUnlessAsked(t *testing.T) {
	db := newDB(t)
	ctx := fence.WithKey(context.Background(), "jobs/b")
	var asked atomic.Int32
	verifier := verifierFunc(func(context.Context, string, uint64) error { asked.Add(1); return nil })
	v := &fence.Verification{Verifier: verifier}
	unbound := mysqlfence.New(db, mysqlfence.WithVerification(v))
	err := unbound.Admit(ctx, "fresh", 7, write("fresh", "b", 7))
	if !errors.Is(err, fence.ErrUnbound) || asked.Load() != 0 {
		t.Fatalf("err %v, asked %d times", err, asked.Load())
	}
	if m, ok := stored(t, db, "fresh"); ok || value(t, db, "fresh") != "<none>" {
		t.Fatalf("mark %d", m)
	}
	req := httptest.NewRequest(http.MethodPut, "/fresh", nil)
	req.Header.Set(fence.Header, "7")
	req.Header.Set(fence.KeyHeader, "jobs/b")
	rec := httptest.NewRecorder()
	fence.Middleware(unbound, nil, http.HandlerFunc(func(http.ResponseWriter, *http.Request) { t.Error("handler ran") })).ServeHTTP(rec, req)
	if rec.Code != 409 || !strings.Contains(rec.Body.String(), `"code":"unbound_resource"`) || asked.Load() != 0 {
		t.Fatalf("behind Middleware: %d %s", rec.Code, rec.Body.String())
	}

	var bound []string
	f := mysqlfence.New(db, mysqlfence.WithVerification(&fence.Verification{
		Verifier: verifier, BindOnFirstUse: true,
		OnBind: func(resource, key string, token uint64) {
			bound = append(bound, fmt.Sprint(resource, " ", key, " ", token))
		},
	}))
	if err := f.Admit(ctx, "fresh", 7, write("fresh", "b", 7)); err != nil {
		t.Fatal(err)
	}
	var key string
	if err := db.QueryRow(`SELECT lock_key FROM fence WHERE resource = 'fresh'`).Scan(&key); err != nil || key != "jobs/b" {
		t.Fatalf("lock_key %q %v", key, err)
	}
	if fmt.Sprint(bound) != "[fresh jobs/b 7]" {
		t.Fatalf("OnBind told %q", bound)
	}
	// Bound now: another key's request is refused before anything is asked.
	if err := f.Admit(fence.WithKey(context.Background(), "jobs/c"), "fresh", 8, nil); !errors.Is(err, fence.ErrWrongKey) || asked.Load() != 1 {
		t.Fatalf("err %v, asked %d times", err, asked.Load())
	}
	// And the resource's recorded binding holds for a fence that binds
	// nothing by configuration: its holder writes on, unasked.
	if err := unbound.Admit(context.Background(), "fresh", 7, nil); err != nil || asked.Load() != 1 {
		t.Fatalf("the holder at a fence without configuration: %v, asked %d times", err, asked.Load())
	}
}

// Issue 43's stalled lock service: a new token's question hangs (the
// server SIGSTOPped, as far as the fence can tell). It is asked before the
// transaction, so no row lock is held while it hangs: the current holder
// (its token equal to the mark) goes on writing, and is never asked about.
// Past Verification.Timeout the new token is refused as
// fence.ErrUnavailable (a *fence.UnavailableError naming the bound),
// having written nothing.
func TestStalledLockServiceDoesNotStallTheResource(t *testing.T) {
	db := newDB(t)
	ctx := context.Background()
	var asked atomic.Int32
	entered := make(chan uint64, 4)
	verifier := verifierFunc(func(ctx context.Context, key string, token uint64) error {
		asked.Add(1)
		if token == 5 {
			return nil // the holder's grant, answered once when it raised the mark
		}
		entered <- token
		<-ctx.Done() // the stalled service: no answer, ever
		return ctx.Err()
	})
	v := &fence.Verification{Key: func(string) string { return "acct/lock" }, Verifier: verifier, Timeout: time.Hour}
	f := mysqlfence.New(db, mysqlfence.WithVerification(v))
	if err := f.Admit(ctx, "acct", 5, write("acct", "w5-0", 5)); err != nil {
		t.Fatal(err)
	}
	newCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- f.Admit(newCtx, "acct", 6, write("acct", "six", 6)) }()
	if tok := <-entered; tok != 6 {
		t.Fatalf("asked about %d", tok)
	}
	// Token 6's question hangs now. The holder of 5 writes on, at both
	// levels (were the row held, its writes would wait and end in
	// InnoDB's lock wait timeout, error 1205).
	for _, l := range levels {
		holder := mysqlfence.New(db, mysqlfence.WithTxOptions(l.opts), mysqlfence.WithVerification(v))
		for i := range 3 {
			if err := holder.Admit(ctx, "acct", 5, write("acct", "w5-"+l.name, 5)); err != nil {
				t.Fatalf("%s write %d of the current holder while the service stalls: %v", l.name, i, err)
			}
		}
	}
	if asked.Load() != 2 {
		t.Fatalf("asked %d times, want 2 (5 once, when it raised the mark; 6 once)", asked.Load())
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("the new token, its caller gone: %v", err)
	}
	// With a bound: refused as unavailable, nothing written.
	short := mysqlfence.New(db, mysqlfence.WithVerification(&fence.Verification{Key: v.Key, Verifier: verifier, Timeout: 50 * time.Millisecond}))
	go func() { <-entered }()
	err := short.Admit(ctx, "acct", 7, write("acct", "seven", 7))
	var ue *fence.UnavailableError
	if !errors.Is(err, fence.ErrUnavailable) || !errors.As(err, &ue) || ue.Timeout != 50*time.Millisecond || ue.Token != 7 || errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("past the verify timeout: %v", err)
	}
	if m, _ := stored(t, db, "acct"); m != 5 || value(t, db, "acct") != "w5-read-committed" {
		t.Fatalf("mark %d value %q", m, value(t, db, "acct"))
	}
}

// The answer was about one mark; the row lock finds another. A current
// holder's token not asked about, after the mark was lowered below it
// meanwhile, is fence.ErrReverify (Verified.Check); a binding made while
// a new token was being asked about is refused, for the key found under
// the lock.
func TestMarkMovedWhileVerifying(t *testing.T) {
	db := newDB(t)
	ctx := context.Background()
	var hook func()
	v := &fence.Verification{
		Key: func(string) string { return "acct/lock" },
		Verifier: verifierFunc(func(context.Context, string, uint64) error {
			if hook != nil {
				hook()
			}
			return nil
		}),
	}
	f := mysqlfence.New(db, mysqlfence.WithVerification(v))
	if err := f.Admit(ctx, "acct", 5, nil); err != nil {
		t.Fatal(err)
	}
	p, err := f.Verify(ctx, "acct", 5)
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, db, `UPDATE fence SET token = 3, write_token = 3 WHERE resource = 'acct'`) // an operator's reset
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Check(ctx, tx); !errors.Is(err, fence.ErrReverify) {
		t.Fatalf("after a reset below the holder's token: %v", err)
	}
	tx.Rollback()

	hook = func() {
		mustExec(t, db, `INSERT INTO fence (resource, token, write_token, lock_key) VALUES ('other', 1, 1, 'jobs/x')`)
	}
	if err := f.Admit(ctx, "other", 9, nil); err != nil {
		// The hook's row is bound to jobs/x, the configuration says
		// acct/lock: Confirm, under the row lock, sees it.
		var we *fence.WrongKeyError
		if !errors.As(err, &we) || we.Bound != "jobs/x" || we.Key != "acct/lock" {
			t.Fatalf("a binding made while asking: %v", err)
		}
	} else {
		t.Fatal("admitted over a binding made while asking")
	}
	var tok int64
	if err := db.QueryRow(`SELECT token FROM fence WHERE resource = 'other'`).Scan(&tok); err != nil || tok != 1 {
		t.Fatalf("mark %d %v", tok, err)
	}
}

// Behind fence.Middleware, a question past the verify timeout is 503
// fence_unavailable, and the handler does not run; the current holder's
// request goes through.
func TestVerifyTimeoutBehindMiddleware(t *testing.T) {
	db := newDB(t)
	v := &fence.Verification{
		Key: func(string) string { return "acct/lock" },
		Verifier: verifierFunc(func(ctx context.Context, _ string, token uint64) error {
			if token == 5 {
				return nil
			}
			<-ctx.Done()
			return ctx.Err()
		}),
		Timeout: 20 * time.Millisecond,
	}
	f := mysqlfence.New(db, mysqlfence.WithVerification(v))
	ran := 0
	h := fence.Middleware(f, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { ran++ }))
	for _, c := range []struct {
		token string
		code  int
		body  string
	}{{"5", 200, ""}, {"6", 503, `"code":"fence_unavailable"`}, {"5", 200, ""}} {
		req := httptest.NewRequest(http.MethodPut, "/acct", nil)
		req.Header.Set(fence.Header, c.token)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != c.code || !strings.Contains(rec.Body.String(), c.body) {
			t.Fatalf("token %s: %d %s", c.token, rec.Code, rec.Body.String())
		}
	}
	if ran != 2 {
		t.Fatalf("handler ran %d times", ran)
	}
}
