package fsm

import (
	"testing"

	"github.com/fencelock/fencelock/internal/locktable"
)

// A token floor raises the counter on every replica alike, never lowers
// it, and survives a snapshot.
func TestTokenFloor(t *testing.T) {
	f := New(nil)
	grant := func(index uint64, key string) uint64 {
		t.Helper()
		r := f.ApplyCommand(index, Command{Op: OpAcquire, Now: 1, Key: key, Holder: "h", TTL: locktable.Second})
		if r.Err != nil || !r.Granted {
			t.Fatalf("acquire %s: %+v", key, r)
		}
		return r.Lease.Token
	}
	if tok := grant(1, "a"); tok != 1 {
		t.Fatalf("first token %d", tok)
	}
	if r := f.ApplyCommand(2, Command{Op: OpTokenFloor, Now: 2, Token: 500}); r.Err != nil {
		t.Fatal(r.Err)
	}
	if tok := grant(3, "b"); tok != 501 {
		t.Fatalf("token after floor 500: %d", tok)
	}
	f.ApplyCommand(4, Command{Op: OpTokenFloor, Now: 3, Token: 7}) // below: no change
	if tok := grant(5, "c"); tok != 502 {
		t.Fatalf("a lower floor moved the counter: %d", tok)
	}
	data, err := f.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	g := New(nil)
	if err := g.UnmarshalBinary(data); err != nil {
		t.Fatal(err)
	}
	if g.LastToken() != 502 {
		t.Fatalf("restored last token %d", g.LastToken())
	}
	if l, ok := g.Get("a", 1); !ok || l.Token != 1 {
		t.Fatalf("a floor touched a lease: %+v %v", l, ok)
	}
}
