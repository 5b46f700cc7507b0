package locktable

import (
	"errors"
	"testing"
)

// TestSharedBesideSessionsAndLockDelay: a semaphore key refuses an
// all-or-nothing acquire and a lock under a session (changing nothing,
// other keys included); an exclusive wait on it is refused, never queued;
// a key in an exclusive lease's lock-delay refuses a shared request until
// the delay ends.
func TestSharedBesideSessionsAndLockDelay(t *testing.T) {
	tb := New()
	sem := Shared{Kind: Semaphore, Permits: 2}
	if _, _, err := tb.AcquireShared("s", "a", sem, 0, 10*Second, 0, WaitLimits{}); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.AcquireAll([]string{"free", "s"}, "b", 1, Second, Options{}); !errors.Is(err, ErrKindMismatch) {
		t.Fatalf("acquire-all over a semaphore: %v", err)
	}
	if _, ok := tb.Get("free", 1); ok || tb.LastToken() != 1 {
		t.Fatal("a refused acquire-all granted something")
	}
	ss, err := tb.OpenSession("b", 1, 10*Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tb.AcquireWith("s", "b", 1, Second, Options{Session: ss.ID}); !errors.Is(err, ErrKindMismatch) {
		t.Fatalf("a session lock on a semaphore: %v", err)
	}
	if _, _, err := tb.Wait("s", "b", 1, Second, NoDeadline); !errors.Is(err, ErrKindMismatch) || len(tb.Waiters("s")) != 0 {
		t.Fatalf("an exclusive wait on a semaphore: %v, waiters %v", err, tb.Waiters("s"))
	}
	if _, err := tb.AcquireWith("d", "x", 1, Second, Options{LockDelay: 5 * Second}); err != nil {
		t.Fatal(err)
	}
	tb.Tick(Time(Second) + 1) // x's lease expires: d is granted to nobody for 5s
	if _, _, err := tb.AcquireShared("d", "y", sem, 2*Time(Second), Second, 0, WaitLimits{}); !errors.As(err, new(*LockDelayError)) {
		t.Fatalf("a semaphore in a lock-delay: %v", err)
	}
	if _, _, err := tb.AcquireShared("d", "y", sem, 7*Time(Second), Second, 0, WaitLimits{}); err != nil {
		t.Fatalf("after the delay: %v", err)
	}
}
