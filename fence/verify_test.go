package fence

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// liveGrants stands in for the lock service: the live grant of each key.
type liveGrants struct {
	live  map[string]uint64
	calls int
}

func (l *liveGrants) Verify(_ context.Context, key string, token uint64) error {
	l.calls++
	if l.live[key] == token {
		return nil
	}
	return &UnverifiedTokenError{Key: key, Token: token}
}

func TestVerificationBinding(t *testing.T) {
	svc := &liveGrants{live: map[string]uint64{"A": 4, "B": 5}}
	v := &Verification{Verifier: svc, BindOnFirstUse: true}
	ka := WithKey(ctx, "A")
	kb := WithKey(ctx, "B")
	for _, s := range []struct {
		name     string
		ctx      context.Context
		token    uint64
		highest  uint64
		bound    string
		want     error
		wantKey  string
		wantCall bool
	}{
		{"nothing bound, no key named", ctx, 4, 0, "", ErrNoKey, "", false},
		{"nothing bound: the named key binds", ka, 4, 0, "", nil, "A", true},
		{"another key's live token, naming it", kb, 5, 4, "A", ErrWrongKey, "", false},
		{"another key's live token, naming the bound key", ka, 5, 4, "A", ErrUnverifiedToken, "", true},
		{"another key's live token, naming none", ctx, 5, 4, "A", ErrUnverifiedToken, "", true},
		{"the mark's own token: not asked again", ctx, 4, 4, "A", nil, "A", false},
		{"the mark's token naming another key", kb, 4, 4, "A", ErrWrongKey, "", false},
		{"an equal token never verified (a mark from before)", ka, 4, 4, "", nil, "A", true},
	} {
		before := svc.calls
		key, err := v.Check(s.ctx, "r", s.token, s.highest, s.bound)
		if !errors.Is(err, s.want) || (s.want == nil && err != nil) || key != s.wantKey {
			t.Errorf("%s: key %q err %v, want %q %v", s.name, key, err, s.wantKey, s.want)
		}
		if called := svc.calls > before; called != s.wantCall {
			t.Errorf("%s: asked the service %v, want %v", s.name, called, s.wantCall)
		}
	}
	var ue *UnverifiedTokenError
	if _, err := v.Check(ka, "r", 9, 4, "A"); !errors.As(err, &ue) || ue.Resource != "r" {
		t.Fatalf("the refusal names the resource: %v", err)
	}

	// A configured binding wins over the request's key, and disagrees
	// with a recorded one out loud.
	v.Key = func(string) string { return "A" }
	if key, err := v.Check(ctx, "r", 4, 0, ""); err != nil || key != "A" {
		t.Fatalf("configured: %q %v", key, err)
	}
	if _, err := v.Check(kb, "r", 5, 0, ""); !errors.Is(err, ErrWrongKey) {
		t.Fatalf("configured A, request names B: %v", err)
	}
	var wk *WrongKeyError
	if _, err := v.Check(ctx, "r", 5, 4, "B"); !errors.As(err, &wk) || wk.Bound != "B" || wk.Key != "A" {
		t.Fatalf("recorded B, configured A: %v", err)
	}
	var nilV *Verification
	if key, err := nilV.Check(ctx, "r", 1<<63, 0, "x"); err != nil || key != "x" {
		t.Fatalf("no verification: %q %v", key, err)
	}
}

// The verifying Guard refuses through the middleware with the codes a
// client can act on.
func TestMiddlewareVerifyingAnswers(t *testing.T) {
	svc := &liveGrants{live: map[string]uint64{"A": 4, "B": 5}}
	g := NewGuard(WithVerification(&Verification{Verifier: svc, BindOnFirstUse: true}))
	for _, s := range []struct {
		token, key string
		status     int
		code       string
	}{
		{"4", "", 400, "missing_key"},
		{"4", "A", 204, ""},
		{"5", "B", 409, "wrong_key"},
		{"5", "", 409, "unverified_token"},
		{"4", "", 204, ""},
	} {
		status, body := fencedPut(t, g, s.token, s.key)
		if status != s.status || (s.code != "" && body["code"] != s.code) {
			t.Fatalf("token %s key %q: %d %v, want %d %s", s.token, s.key, status, body, s.status, s.code)
		}
	}
}

// Finding 2 of issue 43: a verifying fence with no configured binding let
// the first verified request bind a fresh resource, so another key's live
// token, sent naming that key, was admitted and bound the resource to it;
// its rightful holder then got wrong_key until the mark was reset. A
// resource is bound by configuration; binding on first use is asked for.
func TestFirstUseBindingIsNotTheDefault(t *testing.T) {
	svc := &liveGrants{live: map[string]uint64{"A": 4, "B": 5}}
	g := NewGuard(WithVerification(&Verification{Verifier: svc}))
	if err := g.Admit(WithKey(ctx, "B"), "fresh", 5, nil); err == nil {
		t.Fatal("B's live token, naming B, bound a fresh resource nobody configured")
	}
	if h := g.Highest("fresh"); h != 0 {
		t.Fatalf("the refused token raised the mark to %d", h)
	}
	if status, body := fencedPut(t, g, "5", "B"); status != 409 || body["code"] != "unbound_resource" {
		t.Fatalf("through the middleware: %d %v", status, body)
	}
}

// The RWGuard verifies reads and writes alike: a forged token raises
// neither mark, the writer's own reads are not asked about again.
func TestRWGuardVerifies(t *testing.T) {
	svc := &liveGrants{live: map[string]uint64{"A": 4}}
	g := NewRWGuard(WithVerification(&Verification{Verifier: svc, Key: func(string) string { return "A" }}))
	if err := g.AdmitRead(ctx, "doc", 1<<63, nil); !errors.Is(err, ErrUnverifiedToken) {
		t.Fatalf("a forged read: %v", err)
	}
	if err := g.AdmitWrite(ctx, "doc", 1<<63, nil); !errors.Is(err, ErrUnverifiedToken) {
		t.Fatalf("a forged write: %v", err)
	}
	if last, high := g.Marks("doc"); last != 0 || high != 0 {
		t.Fatalf("forged tokens raised the marks to %d, %d", last, high)
	}
	if err := g.AdmitWrite(ctx, "doc", 4, nil); err != nil {
		t.Fatal(err)
	}
	calls := svc.calls
	for range 3 {
		if err := g.AdmitRead(ctx, "doc", 4, nil); err != nil {
			t.Fatal(err)
		}
	}
	if svc.calls != calls {
		t.Fatalf("the current token was asked about %d more times", svc.calls-calls)
	}
	if err := g.AdmitRead(WithKey(ctx, "B"), "doc", 4, nil); !errors.Is(err, ErrWrongKey) {
		t.Fatalf("a read naming another key: %v", err)
	}
}

// hung never answers: it waits for its ctx, as a call to a stopped
// server does.
type hung struct{ asked chan struct{} }

func (h hung) Verify(ctx context.Context, _ string, _ uint64) error {
	if h.asked != nil {
		h.asked <- struct{}{}
	}
	<-ctx.Done()
	return ctx.Err()
}

// Finding 3 of issue 43: a check of a new token against a stalled
// service was bounded only by the client's own retries (about 15 s). It
// is bounded by the Verification's Timeout, and the refusal says so:
// 503 fence_unavailable, the token neither stale nor unverified.
func TestVerifyTimeout(t *testing.T) {
	v := &Verification{Verifier: hung{}, Key: func(string) string { return "A" }, Timeout: 20 * time.Millisecond}
	g := NewGuard(WithVerification(v))
	err := g.Admit(ctx, "r", 7, nil)
	var ue *UnavailableError
	if !errors.As(err, &ue) || !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) ||
		ue.Timeout != 20*time.Millisecond || ue.Key != "A" || !strings.Contains(err.Error(), "within 20ms") {
		t.Fatalf("past the timeout: %v", err)
	}
	if errors.Is(err, ErrUnverifiedToken) || errors.Is(err, ErrStaleToken) || g.Highest("r") != 0 {
		t.Fatalf("judged, or raised: %v, mark %d", err, g.Highest("r"))
	}
	status, body := fencedPut(t, g, "7", "")
	if status != 503 || body["code"] != "fence_unavailable" || !strings.Contains(body["error"].(string), "did not answer") {
		t.Fatalf("through the middleware: %d %v", status, body)
	}
	// The caller giving up is the caller's error, not the service's.
	v.Timeout = -1
	cctx, cancel := context.WithCancel(ctx)
	asked := make(chan struct{}, 1)
	v.Verifier = hung{asked: asked}
	go func() { <-asked; cancel() }()
	if err := g.Admit(cctx, "r", 7, nil); !errors.Is(err, context.Canceled) || errors.Is(err, ErrUnavailable) {
		t.Fatalf("the caller gave up: %v", err)
	}
	if err := v.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := (&Verification{Verifier: hung{}}).Validate(); !errors.Is(err, ErrUnbound) {
		t.Fatalf("a Verification that binds nothing: %v", err)
	}
}

// A mark that moved between Ask and Confirm in a way the answer does not
// cover (a reset lowered it below the token that was not asked about)
// is asked about again, never admitted on an answer to another question.
func TestConfirmAfterTheMarkMoved(t *testing.T) {
	svc := &liveGrants{live: map[string]uint64{"A": 4}}
	v := &Verification{Verifier: svc, Key: func(string) string { return "A" }}
	// Read at mark 9 bound to A: token 9 is the current one, not asked.
	pre, err := v.Ask(ctx, "r", 9, 9, "A")
	if err != nil || svc.calls != 0 {
		t.Fatalf("ask: %v, %d calls", err, svc.calls)
	}
	// Under the lock, the mark was reset to 4: 9 must be asked about.
	if _, err := v.Confirm(ctx, "r", 9, 4, "A", pre); !errors.Is(err, ErrReverify) {
		t.Fatalf("confirm after the mark moved: %v", err)
	}
	if key, err := v.Confirm(ctx, "r", 9, 9, "A", pre); err != nil || key != "A" {
		t.Fatalf("confirm on the same mark: %q %v", key, err)
	}
	// Asked for 4 on a new resource; under the lock it is bound to B.
	pre, err = v.Ask(ctx, "s", 4, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Confirm(ctx, "s", 4, 0, "B", pre); !errors.Is(err, ErrWrongKey) {
		t.Fatalf("bound to another key meanwhile: %v", err)
	}
}
