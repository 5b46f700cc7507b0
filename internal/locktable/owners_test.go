package locktable

import (
	"maps"
	"testing"
)

// checkOwners fails unless the owner counts kept as the table changed
// are those counted again from scratch. The model tests call it after
// every step.
func checkOwners(tb interface{ Fatalf(string, ...any) }, t *Table) {
	kept := map[string]OwnerCount{}
	for o, c := range t.owners {
		kept[o] = *c
	}
	saved := t.owners
	t.recountOwners()
	fresh := map[string]OwnerCount{}
	for o, c := range t.owners {
		fresh[o] = *c
	}
	t.owners = saved
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
	if got := tb.Owner("bob"); got != (OwnerCount{}) || len(tb.owners) != 0 {
		t.Fatalf("after every lease and session expired: %+v (%d owners kept)", got, len(tb.owners))
	}
	checkOwners(t, tb)
}
