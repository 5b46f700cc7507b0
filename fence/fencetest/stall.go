package fencetest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock/fence"
)

// StallVerifier is a lock service that stalls: it confirms the tokens
// in its live set at once, and for any other token it tells Asked and
// then waits, whatever its ctx says, until Release, when it answers no
// (a *fence.UnverifiedTokenError). A hung call that ignores its deadline
// is the worst a real service can do to a fence.
type StallVerifier struct {
	Asked chan uint64 // a token it is stalling on (buffered)

	mu      sync.Mutex
	live    map[uint64]bool
	release chan struct{}
	once    sync.Once
}

// NewStallVerifier confirms the tokens live and stalls on the others.
func NewStallVerifier(live ...uint64) *StallVerifier {
	s := &StallVerifier{Asked: make(chan uint64, 16), live: map[uint64]bool{}, release: make(chan struct{})}
	for _, t := range live {
		s.live[t] = true
	}
	return s
}

// Verify implements fence.Verifier.
func (s *StallVerifier) Verify(_ context.Context, key string, token uint64) error {
	s.mu.Lock()
	ok := s.live[token]
	s.mu.Unlock()
	if ok {
		return nil
	}
	s.Asked <- token
	<-s.release
	return &fence.UnverifiedTokenError{Key: key, Token: token}
}

// Release ends every stall, now and later.
func (s *StallVerifier) Release() { s.once.Do(func() { close(s.release) }) }

// hangGuard bounds how long the check waits for something that, with
// the rule kept, happens at once: it decides a failure, never a pass.
const hangGuard = 30 * time.Second

// CheckStalledVerifier holds a verifying fence to the rule that it never
// asks the lock service while holding a resource: with the service
// stalled on a newcomer's token (6) for resource "r", the current holder
// (token 5, already admitted on "r" and on "other") goes on writing to
// both, and the newcomer, once the service says no, is refused and
// changes nothing. open makes the fence under test with v (and closes it
// at the test's end).
func CheckStalledVerifier(t *testing.T, open func(t *testing.T, v *fence.Verification) fence.Fence) {
	t.Helper()
	ctx := context.Background()
	sv := NewStallVerifier(5)
	v := &fence.Verification{Verifier: sv, Key: func(string) string { return "k" }}
	f := open(t, v)
	// Registered after open's cleanups, so it runs before them: a failure
	// below must not leave the newcomer stalled on what they close.
	t.Cleanup(sv.Release)
	wrote := 0
	write := func(context.Context) error { wrote++; return nil }
	for _, r := range []string{"r", "other"} {
		if err := f.Admit(ctx, r, 5, write); err != nil {
			t.Fatalf("the holder's first write to %s: %v", r, err)
		}
	}

	newcomer := make(chan error, 1)
	ran := false
	go func() {
		newcomer <- f.Admit(ctx, "r", 6, func(context.Context) error { ran = true; return nil })
	}()
	select {
	case <-sv.Asked:
	case err := <-newcomer:
		t.Fatalf("the newcomer's token was not verified: %v", err)
	case <-time.After(hangGuard):
		t.Fatal("the newcomer's token never reached the verifier")
	}

	// The service is stalled on token 6: the holder of 5 writes on.
	for i, r := range []string{"r", "r", "other", "r"} {
		done := make(chan error, 1)
		go func() { done <- f.Admit(ctx, r, 5, write) }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("write %d of the current holder to %s while the service is stalled: %v", i+1, r, err)
			}
		case <-time.After(hangGuard):
			t.Fatalf("write %d of the current holder to %s waited behind the newcomer's verification", i+1, r)
		}
	}
	select {
	case err := <-newcomer:
		t.Fatalf("the newcomer was answered (%v) before the service was", err)
	default:
	}
	if wrote != 6 {
		t.Fatalf("%d of the holder's 6 writes landed", wrote)
	}

	sv.Release()
	if err := <-newcomer; !errors.Is(err, fence.ErrUnverifiedToken) || ran {
		t.Fatalf("the newcomer after the service said no: %v (effect ran %v)", err, ran)
	}
	if err := f.Admit(ctx, "r", 5, write); err != nil {
		t.Fatalf("the holder after the newcomer's refusal: %v", err)
	}
}
