package service

import (
	"context"
	"testing"

	"github.com/fencelock/fencelock/api"
)

// The principal an operation is counted against is its argument: a
// principal at its quota is refused, another principal and a call with
// none ("": ACLs off, an in-process caller) are not, and the context
// carries nothing the service reads.
func TestQuotaCountsThePrincipalGiven(t *testing.T) {
	s, _, _ := newTestServiceWith(t, func(c *Config) { c.QuotaSessions, c.QuotaLocks = 1, 1 })
	ctx := context.Background()
	if _, err := s.OpenSession(ctx, "bob", api.SessionOpenRequest{Holder: "bob/1", TTLMs: 60000}); err != nil {
		t.Fatal(err)
	}
	_, err := s.OpenSession(ctx, "bob", api.SessionOpenRequest{Holder: "bob/2", TTLMs: 60000})
	if e := wantCode(t, err, api.CodeQuotaExceeded); e.Quota != api.QuotaSessions {
		t.Errorf("bob's second session: quota %q", e.Quota)
	}
	if _, err := s.OpenSession(ctx, "carol", api.SessionOpenRequest{Holder: "carol", TTLMs: 60000}); err != nil {
		t.Errorf("carol's session: %v", err)
	}
	if _, err := s.OpenSession(ctx, "", api.SessionOpenRequest{Holder: "bob/3", TTLMs: 60000}); err != nil {
		t.Errorf("a session without a principal: %v", err)
	}

	if _, err := s.Acquire(ctx, "bob", api.AcquireRequest{Key: "a", Holder: "bob/1", TTLMs: 60000}); err != nil {
		t.Fatal(err)
	}
	_, err = s.Acquire(ctx, "bob", api.AcquireRequest{Key: "b", Holder: "bob/1", TTLMs: 60000})
	wantCode(t, err, api.CodeQuotaExceeded)
	_, err = s.AcquireAll(ctx, "bob", api.AcquireAllRequest{Keys: []string{"c", "d"}, Holder: "bob/2", TTLMs: 60000})
	wantCode(t, err, api.CodeQuotaExceeded)
	if _, err := s.AcquireAll(ctx, "", api.AcquireAllRequest{Keys: []string{"c", "d"}, Holder: "bob/2", TTLMs: 60000}); err != nil {
		t.Errorf("acquire-all without a principal: %v", err)
	}
}
