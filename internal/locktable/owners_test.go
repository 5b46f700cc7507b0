package locktable

import (
	"fmt"
	"maps"
	"testing"
)

// checkOwners fails unless the owner counts kept as the table changed
// are those counted again from scratch. The model tests call it after
// every step.
func checkOwners(tb interface{ Fatalf(string, ...any) }, t *Table) {
	counts := func() map[string]OwnerCount {
		out := map[string]OwnerCount{}
		for o, c := range t.owners {
			if *c != (OwnerCount{}) {
				out[o] = *c
			}
		}
		return out
	}
	kept := counts()
	saved, idle := t.owners, t.idleOwners
	t.recountOwners()
	fresh := counts()
	t.owners, t.idleOwners = saved, idle
	if !maps.Equal(kept, fresh) {
		tb.Fatalf("owner counts kept %v, counted again %v", kept, fresh)
	}
}

func TestOwnerCounts(t *testing.T) {
	tb := New()
	if _, err := tb.Acquire("a", "bob", 0, 10); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Acquire("b", "bob/1", 0, 10); err != nil {
		t.Fatal(err)
	}
	if _, _, err := tb.Wait("a", "bob/2", 0, 10, 100); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.OpenSession("bob/s", 0, 10); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Acquire("c", "bobby", 0, 10); err != nil {
		t.Fatal(err)
	}
	if got, want := tb.Owner("bob"), (OwnerCount{Locks: 2, Waits: 1, Sessions: 1}); got != want {
		t.Fatalf("bob: %+v, want %+v", got, want)
	}
	if got := tb.Owner("bobby"); got.Locks != 1 {
		t.Fatalf("bobby is its own owner: %+v", got)
	}
	checkOwners(t, tb)
	// The hand-off moves bob/2 from the queue to the lock.
	if ok, err := tb.Release("a", "bob", 1); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if got, want := tb.Owner("bob"), (OwnerCount{Locks: 2, Sessions: 1}); got != want {
		t.Fatalf("bob after the hand-off: %+v, want %+v", got, want)
	}
	b, err := tb.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	restored := New()
	if err := restored.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	if got, want := restored.Owner("bob"), tb.Owner("bob"); got != want {
		t.Fatalf("restored: %+v, want %+v", got, want)
	}
	tb.Tick(1000)
	if got := tb.Owner("bob"); got != (OwnerCount{}) {
		t.Fatalf("after every lease and session expired: %+v", got)
	}
	// Owners with nothing are forgotten in sweeps.
	for i := range 200 {
		h := fmt.Sprintf("o%d", i)
		if _, err := tb.Acquire("k", h, 2000, 10); err != nil {
			t.Fatal(err)
		}
		if ok, _ := tb.Release("k", h, 2000); !ok {
			t.Fatal("release", h)
		}
	}
	if len(tb.owners) > 130 {
		t.Errorf("%d owners kept with nothing", len(tb.owners))
	}
	checkOwners(t, tb)
}

func TestCounted(t *testing.T) {
	tb := New()
	tb.Acquire("a", "h", 0, 10)
	tb.Wait("a", "w", 0, 10, 100)
	tb.AcquireShared("s", "r", Shared{Kind: ReadWrite}, 0, 10, 0, WaitLimits{})
	tb.AcquireShared("s", "x", Shared{Kind: ReadWrite, Write: true}, 0, 10, 100, WaitLimits{})
	for _, c := range []struct {
		key, holder string
		want        bool
	}{{"a", "h", true}, {"a", "w", true}, {"a", "z", false}, {"b", "h", false}, {"s", "r", true}, {"s", "x", true}, {"s", "h", false}} {
		if got := tb.Counted(c.key, c.holder); got != c.want {
			t.Errorf("Counted(%s, %s) = %v", c.key, c.holder, got)
		}
	}
	checkOwners(t, tb)
}
