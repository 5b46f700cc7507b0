package fence

import (
	"context"
	"errors"
	"testing"
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
	v := &Verification{Verifier: svc}
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
	g := NewGuard(WithVerification(&Verification{Verifier: svc}))
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
