package fsm

import (
	"bytes"
	"fmt"
	"os"
	"testing"

	"github.com/fencelock/fencelock/internal/locktable"
)

// flood has holder make n remembered calls, each under a request id of
// its own: extends of its lease on key.
func flood(a *applier, holder, key string, n int, now locktable.Time) {
	a.do(Command{Op: OpAcquire, Now: now, Key: key, Holder: holder, TTL: 1000 * locktable.Second})
	for i := range n {
		a.do(Command{Op: OpExtend, RequestID: fmt.Sprintf("%s-%d", holder, i), Now: now, Key: key, Holder: holder, Token: a.f.table.LastToken(), TTL: 1000 * locktable.Second})
	}
}

// Issue 41, item 4: the request-id memory was one list of the last 10,000
// requests of everybody, so another principal's 10,000 calls pushed out a
// victim's renew and the renew, retried, was applied again (token 18 where
// the first answer had said 17). Once the log has reached an entry
// marked ByOwner, each owner (a principal, with ACLs) has 10,000
// of its own: the retry after another's 20,000 calls keeps its answer, on a
// replica restored from a snapshot in between too.
func TestAnotherOwnerCannotFlushARetriedRenew(t *testing.T) {
	a, _ := newApplier(t)
	b, _ := newApplier(t)
	both := func(c Command) (*Result, *Result) { return a.do(c), b.do(c) }
	both(Command{Op: OpTick, Now: 1, ByOwner: true})
	both(Command{Op: OpAcquire, RequestID: "a1", Now: 1, Key: "jobs/x", Holder: "alice/app", TTL: 100 * locktable.Second})
	renew := Command{Op: OpRenew, RequestID: "renew-1", Now: 2, Key: "jobs/x", Holder: "alice/app", TTL: 100 * locktable.Second}
	first, _ := both(renew)
	if !first.Granted || first.Lease.Token != 2 {
		t.Fatalf("renew: %+v", first)
	}
	for _, x := range []*applier{a, b} {
		flood(x, "mallory", "m/1", 20000, 3)
	}
	// b restarts from a snapshot.
	snap, _ := b.f.MarshalBinary()
	b.f = New(nil)
	if err := b.f.UnmarshalBinary(snap); err != nil {
		t.Fatal(err)
	}
	if !b.f.RemembersByOwner() {
		t.Fatal("the snapshot lost the rules")
	}
	last := a.f.LastToken()
	renew.Now = 4
	ra, rb := both(renew)
	for _, r := range []*Result{ra, rb} {
		if !r.Duplicate || r.Lease.Token != first.Lease.Token {
			t.Fatalf("the renew retried after another owner's 20,000 calls: %+v; want the first answer, token %d", r, first.Lease.Token)
		}
	}
	if a.f.LastToken() != last || b.f.LastToken() != last {
		t.Fatalf("the retried renew issued a token: last %d, %d; want %d", a.f.LastToken(), b.f.LastToken(), last)
	}
	// mallory keeps 10,000 of its own, its newest.
	if o := a.f.mem.owners["mallory"]; o == nil || o.n != RememberCount || o.tail.id != "mallory\x00m/1\x00mallory-19999" {
		t.Fatalf("mallory's memory: %+v", o)
	}
	sa, _ := a.f.MarshalBinary()
	sb, _ := b.f.MarshalBinary()
	if !bytes.Equal(sa, sb) {
		t.Fatal("the replica restored from a snapshot diverged")
	}
}

// Before the log's first entry marked ByOwner the memory is what it was, so
// that a log written then and replayed decides each retry as it was
// decided: the oldest of all go first past 10,000, and the renew is
// applied again. A snapshot of it has no mark and restores to those rules.
func TestBeforeRememberByOwnerTheMemoryIsShared(t *testing.T) {
	a, _ := newApplier(t)
	a.do(Command{Op: OpAcquire, RequestID: "a1", Now: 1, Key: "jobs/x", Holder: "alice", TTL: 100 * locktable.Second})
	renew := Command{Op: OpRenew, RequestID: "renew-1", Now: 2, Key: "jobs/x", Holder: "alice", TTL: 100 * locktable.Second}
	first := a.do(renew)
	flood(a, "mallory", "m/1", RememberCount, 3)
	snap, _ := a.f.MarshalBinary()
	b, _ := newApplier(t)
	if err := b.f.UnmarshalBinary(snap); err != nil {
		t.Fatal(err)
	}
	if b.f.RemembersByOwner() || b.f.mem.Len() != RememberCount {
		t.Fatalf("restored: by owner %v, %d remembered", b.f.RemembersByOwner(), b.f.mem.Len())
	}
	b.index = a.index
	renew.Now = 4
	for _, x := range []*applier{a, b} {
		if r := x.do(renew); r.Duplicate || r.Lease.Token == first.Lease.Token {
			t.Fatalf("before the switch, the renew retried after 10,000 other calls: %+v; want it applied again", r)
		}
	}
}

// Past RememberTotal in all, the owner with the most gives up its oldest:
// eleven owners with 10,000 each leave a victim's one request alone.
func TestTheFullestOwnerForgetsFirst(t *testing.T) {
	if testing.Short() {
		t.Skip("110,000 applies")
	}
	a, _ := newApplier(t)
	a.do(Command{Op: OpTick, Now: 1, ByOwner: true})
	a.do(Command{Op: OpAcquire, RequestID: "victim", Now: 1, Key: "v", Holder: "alice", TTL: 1000 * locktable.Second})
	for i := range RememberTotal/RememberCount + 1 {
		flood(a, fmt.Sprintf("m%02d", i), fmt.Sprintf("m/%d", i), RememberCount, 2)
	}
	if a.f.mem.Len() != RememberTotal {
		t.Fatalf("remembers %d, want %d", a.f.mem.Len(), RememberTotal)
	}
	if _, ok := a.f.mem.get("alice\x00v\x00victim"); !ok {
		t.Fatal("the victim's request was forgotten for room")
	}
	// Each of the eleven gave up its oldest in turn as the last one
	// filled up: they share what the victim does not use.
	share := (RememberTotal - 1) / (RememberTotal/RememberCount + 1)
	for name, o := range a.f.mem.owners {
		if name != "alice" && (o.n < share || o.n > share+1) {
			t.Errorf("%s keeps %d, want %d or %d", name, o.n, share, share+1)
		}
	}
}

// A snapshot with the mark holds at most RememberCount requests of one
// owner; one that holds more is refused as corrupt. A snapshot without
// it is read by the rules it was made under.
func TestSnapshotRefusesAnOwnerOverItsShare(t *testing.T) {
	a, _ := newApplier(t)
	a.do(Command{Op: OpTick, Now: 1, ByOwner: true})
	flood(a, "h", "k", 3, 1)
	good, _ := a.f.MarshalBinary()
	if err := New(nil).UnmarshalBinary(good); err != nil {
		t.Fatal(err)
	}
	for i := range RememberCount {
		a.f.mem.add(&remembered{id: fmt.Sprintf("h\x00k\x00x%d", i), op: OpExtend, at: 1})
	}
	if err := New(nil).UnmarshalBinary(a.f.marshal()); err == nil {
		t.Fatal("a snapshot with 10,003 requests of one owner was restored")
	}
}

// testdata/snapshot-issue40.bin was written by the FSM of commit 42d5f27,
// before the memory was kept by owner, after: alice/app acquires jobs/x
// (request a1) and renews it (renew-1, token 2); bob acquires jobs/y
// (b1, token 3); carol waits on it (w1, queued); dave opens a session
// (s1, session 1); erin releases a key nobody holds (rel).
//
// It restores as it was: to the shared memory's rules, every request
// remembered, encoded again byte for byte; a retried renew is answered
// from it, and an entry marked ByOwner then turns the rules on and marks
// the next snapshot.
func TestSnapshotFromBeforeTheMemoryByOwnerRestores(t *testing.T) {
	old, err := os.ReadFile("testdata/snapshot-issue40.bin")
	if err != nil {
		t.Fatal(err)
	}
	a, _ := newApplier(t)
	if err := a.f.UnmarshalBinary(old); err != nil {
		t.Fatalf("restoring a snapshot of before the change: %v", err)
	}
	if a.f.RemembersByOwner() || a.f.mem.Len() != 6 || a.f.LastToken() != 3 {
		t.Fatalf("restored: by owner %v, %d remembered, last token %d", a.f.RemembersByOwner(), a.f.mem.Len(), a.f.LastToken())
	}
	if again, _ := a.f.MarshalBinary(); !bytes.Equal(again, old) {
		t.Fatal("the restored snapshot encodes differently")
	}
	a.index = 100
	sec := locktable.Time(locktable.Second)
	r := a.do(Command{Op: OpRenew, RequestID: "renew-1", Now: 10 * sec, Key: "jobs/x", Holder: "alice/app", TTL: 600 * locktable.Second})
	if !r.Duplicate || r.Lease.Token != 2 {
		t.Fatalf("the renew retried after the restore: %+v, want its first answer, token 2", r)
	}
	if w := a.do(Command{Op: OpWait, RequestID: "w1", Now: 10 * sec, Key: "jobs/y", Holder: "carol", TTL: 60 * locktable.Second, Deadline: 500 * sec, MaxKeyWaiters: 1000, MaxWaiters: 100000}); !w.Queued || a.f.QueuedCount() != 1 {
		t.Fatalf("the wait re-sent after the restore: %+v, %d queued", w, a.f.QueuedCount())
	}
	a.do(Command{Op: OpTick, Now: 10 * sec, ByOwner: true})
	data, _ := a.f.MarshalBinary()
	b, _ := newApplier(t)
	if err := b.f.UnmarshalBinary(data); err != nil || !b.f.RemembersByOwner() || b.f.mem.Len() != a.f.mem.Len() {
		t.Fatalf("the next snapshot: %v, by owner %v, %d remembered", err, b.f.RemembersByOwner(), b.f.mem.Len())
	}
}
