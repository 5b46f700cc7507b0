package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/fencelock/fencelock/internal/locktable"
)

// TestWaitLimitsInTheCommand: the queue limits travel in the wait command,
// so every node refuses the same waiter. The (limit+1)th waiter on a key
// is refused with ErrTooManyWaiters and nothing changes (the table, the
// remembered requests: its retry is not answered from memory); so is the
// one past the total; and a follower restored from a snapshot refuses
// exactly the same commands.
func TestWaitLimitsInTheCommand(t *testing.T) {
	a, _ := newApplier(t)
	if r := a.do(Command{Op: OpAcquire, Now: tsec, Key: "k", Holder: "owner", TTL: 100 * sec}); r.Err != nil {
		t.Fatal(r.Err)
	}
	wait := func(key, holder string) Command {
		return Command{Op: OpWait, RequestID: "r-" + holder, Now: tsec, Key: key, Holder: holder, TTL: sec,
			Deadline: 50 * tsec, MaxKeyWaiters: 3, MaxWaiters: 5}
	}
	for i := range 3 {
		if r := a.do(wait("k", fmt.Sprint("w", i))); r.Err != nil || !r.Queued {
			t.Fatalf("waiter %d: %+v", i, r)
		}
	}
	follower := restored(t, a.f)
	before := a.f.marshal()
	r := a.do(wait("k", "w3"))
	var full *locktable.QueueFullError
	if !errors.Is(r.Err, locktable.ErrTooManyWaiters) || !errors.As(r.Err, &full) || full.Scope != "key" || r.Queued || r.Granted {
		t.Fatalf("4th waiter: %+v; want ErrTooManyWaiters for the key", r)
	}
	if got := a.f.Waiters("k"); len(got) != 3 {
		t.Fatalf("queue %v", got)
	}
	// The same entry on a follower: the same refusal.
	fr := follower.ApplyCommand(a.index, wait("k", "w3"))
	if !errors.Is(fr.Err, locktable.ErrTooManyWaiters) {
		t.Fatalf("the follower answered %+v", fr)
	}
	if after := a.f.marshal(); !bytes.Equal(stripIndex(t, before), stripIndex(t, after)) {
		t.Fatal("the refused wait changed the state")
	}
	// The total: 3 on k, 2 more on another key, then one too many.
	if r := a.do(Command{Op: OpAcquire, Now: tsec, Key: "j", Holder: "owner", TTL: 100 * sec}); r.Err != nil {
		t.Fatal(r.Err)
	}
	for i := range 2 {
		if r := a.do(wait("j", fmt.Sprint("v", i))); r.Err != nil || !r.Queued {
			t.Fatalf("waiter %d on j: %+v", i, r)
		}
	}
	if r := a.do(wait("j", "v2")); !errors.As(r.Err, &full) || full.Scope != "total" {
		t.Fatalf("6th waiter in all: %+v; want ErrTooManyWaiters in total", r)
	}
	if a.f.QueuedCount() != 5 {
		t.Fatalf("QueuedCount %d", a.f.QueuedCount())
	}
	// A queued holder re-sending its wait keeps its place.
	if r := a.do(wait("k", "w1")); r.Err != nil || !r.Queued {
		t.Fatalf("re-sent wait: %+v", r)
	}
	// Without limits in the command (entries from before they existed),
	// nothing is capped.
	c := wait("k", "w9")
	c.MaxKeyWaiters, c.MaxWaiters = 0, 0
	if r := a.do(c); r.Err != nil || !r.Queued {
		t.Fatalf("a wait with no limits: %+v", r)
	}
}

// stripIndex is a snapshot encoding without its applied index and checksum,
// which every command moves.
func stripIndex(t *testing.T, b []byte) []byte {
	t.Helper()
	f := New(nil)
	if err := f.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	f.index = 0
	out := f.marshal()
	return out[:len(out)-4]
}
