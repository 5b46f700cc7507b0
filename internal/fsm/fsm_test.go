package fsm

import (
	"bytes"
	"errors"
	"testing"

	"github.com/fencelock/fencelock/internal/acl"
	"github.com/fencelock/fencelock/internal/locktable"
)

const (
	sec  = locktable.Second
	tsec = locktable.Time(sec)
)

// recorder keeps the events an FSM reports.
type recorder struct{ evs []indexed }

type indexed struct {
	index uint64
	ev    locktable.Event
}

func (r *recorder) observe(i uint64, ev locktable.Event) { r.evs = append(r.evs, indexed{i, ev}) }

// applier feeds commands with increasing indexes, as raft would.
type applier struct {
	t     *testing.T
	f     *FSM
	index uint64
}

func (a *applier) do(c Command) *Result {
	a.t.Helper()
	a.index++
	return a.f.ApplyCommand(a.index, c)
}

func newApplier(t *testing.T) (*applier, *recorder) {
	rec := &recorder{}
	return &applier{t: t, f: New(rec.observe)}, rec
}

func TestApplySeedExample(t *testing.T) {
	a, _ := newApplier(t)
	r := a.do(Command{Op: OpAcquire, Now: 0, Key: "resource", Holder: "client-a", TTL: 10})
	if r.Err != nil || !r.Granted || r.Lease.Token != 1 {
		t.Fatalf("first acquire: %+v", r)
	}
	r = a.do(Command{Op: OpAcquire, Now: 5, Key: "resource", Holder: "client-b", TTL: 10})
	var held *locktable.HeldError
	if !errors.As(r.Err, &held) || held.Lease.Holder != "client-a" || r.Granted {
		t.Fatalf("second acquire: %+v", r)
	}
	r = a.do(Command{Op: OpAcquire, Now: 10, Key: "resource", Holder: "client-b", TTL: 10})
	if r.Err != nil || r.Lease.Token != 2 {
		t.Fatalf("acquire after expiry: %+v", r)
	}
	if a.f.Check("resource", 1, 10) || !a.f.Check("resource", 2, 10) {
		t.Fatal("token 1 must be stale and token 2 current")
	}
}

func TestApplyClampsTimeForward(t *testing.T) {
	a, _ := newApplier(t)
	a.do(Command{Op: OpTick, Now: 100})
	// Stamped earlier than the last apply (two proposals enqueued out of
	// stamp order): it runs at 100, never in the past.
	r := a.do(Command{Op: OpAcquire, Now: 40, Key: "k", Holder: "h", TTL: 10})
	if r.Now != 100 || r.Lease.Expiry != 110 {
		t.Fatalf("apply at %d, expiry %d; want 100 and 110", r.Now, r.Lease.Expiry)
	}
	if a.f.Now() != 100 {
		t.Fatalf("Now = %d, want 100", a.f.Now())
	}
	// A command without a time-taking call still moves the clock.
	a.do(Command{Op: OpCancelWait, Now: 150, Key: "k", Holder: "x"})
	if a.f.Now() != 150 {
		t.Fatalf("Now = %d, want 150", a.f.Now())
	}
}

func TestApplyRenewExtendRelease(t *testing.T) {
	a, _ := newApplier(t)
	if r := a.do(Command{Op: OpRenew, Now: 1, Key: "k", Holder: "h", TTL: 10}); !errors.Is(r.Err, locktable.ErrNotHeld) {
		t.Fatalf("renew of a free key: %+v", r)
	}
	a.do(Command{Op: OpAcquire, Now: 1, Key: "k", Holder: "h", TTL: 10})
	if r := a.do(Command{Op: OpRenew, Now: 2, Key: "k", Holder: "other", TTL: 10}); !errors.Is(r.Err, locktable.ErrNotHeld) {
		t.Fatalf("renew by another holder: %+v", r)
	}
	r := a.do(Command{Op: OpRenew, Now: 2, Key: "k", Holder: "h", TTL: 10})
	if r.Err != nil || r.Lease.Token != 2 {
		t.Fatalf("renew: %+v", r)
	}
	if r := a.do(Command{Op: OpExtend, Now: 3, Key: "k", Holder: "h", Token: 1, TTL: 10}); !errors.Is(r.Err, locktable.ErrNotHeld) {
		t.Fatalf("extend with the superseded token: %+v", r)
	}
	r = a.do(Command{Op: OpExtend, Now: 3, Key: "k", Holder: "h", Token: 2, TTL: 50})
	if r.Err != nil || r.Lease.Token != 2 || r.Lease.Expiry != 53 {
		t.Fatalf("extend: %+v", r)
	}
	if r := a.do(Command{Op: OpRelease, Now: 4, Key: "k", Holder: "h", Token: 1}); r.Released {
		t.Fatal("release with a stale token released")
	}
	if r := a.do(Command{Op: OpRelease, Now: 4, Key: "k", Holder: "h", Token: 2}); !r.Released {
		t.Fatalf("release: %+v", r)
	}
	if r := a.do(Command{Op: OpRelease, Now: 5, Key: "k", Holder: "h"}); r.Released || r.Err != nil {
		t.Fatalf("second release: %+v", r)
	}
}

func TestApplyExtendBatch(t *testing.T) {
	a, _ := newApplier(t)
	a.do(Command{Op: OpAcquire, Now: 1, Key: "a", Holder: "h", TTL: 10}) // token 1
	a.do(Command{Op: OpAcquire, Now: 1, Key: "b", Holder: "h", TTL: 10}) // token 2
	r := a.do(Command{Op: OpExtendBatch, Now: 5, Holder: "h", TTL: 100, Items: []Item{
		{Key: "a", Token: 1}, {Key: "b", Token: 9}, {Key: "c", Token: 3},
	}})
	if len(r.Batch) != 3 {
		t.Fatalf("batch: %+v", r)
	}
	if b := r.Batch[0]; b.Err != nil || b.Lease.Expiry != 105 {
		t.Errorf("a: %+v", b)
	}
	for _, b := range r.Batch[1:] {
		if !errors.Is(b.Err, locktable.ErrNotHeld) {
			t.Errorf("%s: %+v, want ErrNotHeld", b.Key, b)
		}
	}
}

func TestApplyWaitHandOffEventsCarryIndex(t *testing.T) {
	a, rec := newApplier(t)
	a.do(Command{Op: OpAcquire, Now: 1, Key: "k", Holder: "a", TTL: 10})
	r := a.do(Command{Op: OpWait, Now: 2, Key: "k", Holder: "b", TTL: 10, Deadline: 1000})
	if !r.Queued || r.Granted {
		t.Fatalf("wait: %+v", r)
	}
	if got := a.f.QueuedWaiters(); len(got) != 1 || got[0].Holder != "b" {
		t.Fatalf("queued: %+v", got)
	}
	rec.evs = nil
	r = a.do(Command{Op: OpRelease, Now: 3, Key: "k", Holder: "a"})
	if !r.Released {
		t.Fatal("release failed")
	}
	if len(rec.evs) != 2 || rec.evs[1].ev.Kind != locktable.EventGranted || rec.evs[1].ev.Holder != "b" || rec.evs[1].index != r.Index {
		t.Fatalf("events: %+v", rec.evs)
	}
	// Expiry by Tick hands off too, and dropped waiters are reported.
	a.do(Command{Op: OpWait, Now: 4, Key: "k", Holder: "c", TTL: 10, Deadline: 1000})
	a.do(Command{Op: OpWait, Now: 4, Key: "k", Holder: "d", TTL: 10, Deadline: 5})
	if at, ok := a.f.NextDeadline(); !ok || at != 5 {
		t.Fatalf("next deadline %d %v, want 5", at, ok)
	}
	rec.evs = nil
	a.do(Command{Op: OpTick, Now: 13})
	var kinds []string
	for _, e := range rec.evs {
		kinds = append(kinds, e.ev.Kind.String()+":"+e.ev.Holder)
	}
	want := "[expired:b wait-dropped:d granted:c]"
	if got := []string(kinds); len(got) != 3 || fmtList(got) != want {
		t.Fatalf("tick events %v, want %s", kinds, want)
	}
	if r := a.do(Command{Op: OpCancelWaits, Now: 14, Items: []Item{{Key: "k", Holder: "zz"}}}); r.Cancelled != 0 {
		t.Fatalf("cancelled a waiter that does not exist: %+v", r)
	}
}

func fmtList(s []string) string {
	var b bytes.Buffer
	b.WriteString("[")
	for i, x := range s {
		if i > 0 {
			b.WriteString(" ")
		}
		b.WriteString(x)
	}
	b.WriteString("]")
	return b.String()
}

func TestApplyBadEntries(t *testing.T) {
	a, _ := newApplier(t)
	r := a.f.Apply(1, 1, []byte{0xff})
	if !errors.Is(r.Err, ErrBadCommand) {
		t.Fatalf("garbage entry: %+v", r)
	}
	if r := a.f.Apply(2, 1, nil); r.Err != nil || r.Index != 2 {
		t.Fatalf("noop: %+v", r)
	}
	r = a.do(Command{Op: OpAcquire, Now: 1, Key: "", Holder: "h", TTL: 10})
	var in *locktable.InputError
	if !errors.As(r.Err, &in) || in.Field != "key" {
		t.Fatalf("empty key: %+v", r)
	}
	if a.f.LastToken() != 0 {
		t.Fatal("a refused command issued a token")
	}
}

func TestSnapshotRestore(t *testing.T) {
	a, _ := newApplier(t)
	a.do(Command{Op: OpAcquire, Now: 10 * tsec, Key: "a", Holder: "h", TTL: 60 * sec})
	a.do(Command{Op: OpAcquire, Now: 11 * tsec, Key: "b", Holder: "h", TTL: 60 * sec})
	a.do(Command{Op: OpWait, Now: 12 * tsec, Key: "b", Holder: "w", TTL: 60 * sec, Deadline: 100 * tsec})
	a.do(Command{Op: OpTick, Now: 20 * tsec})

	snap := a.f.Snapshot()
	var s bytes.Buffer
	if n, err := snap.WriteTo(&s); err != nil || n != snap.Len() || int64(s.Len()) != n {
		t.Fatalf("write: %d bytes of %d (%d buffered), %v", n, snap.Len(), s.Len(), err)
	}

	// Restore into an FSM with other state: the old state is discarded.
	b, rec := newApplier(t)
	b.do(Command{Op: OpAcquire, Now: 1, Key: "zzz", Holder: "x", TTL: 1000 * sec})
	if err := b.f.Restore(bytes.NewReader(s.Bytes())); err != nil {
		t.Fatal(err)
	}
	if _, ok := b.f.Get("zzz", 20*tsec); ok {
		t.Fatal("restore kept previous state")
	}
	if b.f.Now() != 20*tsec || b.f.LastToken() != 2 || b.f.AppliedIndex() != a.index {
		t.Fatalf("restored now=%d last=%d index=%d", b.f.Now(), b.f.LastToken(), b.f.AppliedIndex())
	}
	if l, ok := b.f.Get("a", 20*tsec); !ok || l.Token != 1 || l.Holder != "h" {
		t.Fatalf("restored lease a: %+v %v", l, ok)
	}
	if w := b.f.Waiters("b"); len(w) != 1 || w[0] != "w" {
		t.Fatalf("restored waiters %v", w)
	}
	// The restored FSM keeps its observer and goes on issuing tokens.
	rec.evs = nil
	b.index = a.index
	r := b.do(Command{Op: OpAcquire, Now: 21 * tsec, Key: "c", Holder: "h", TTL: sec})
	if r.Lease.Token != 3 || len(rec.evs) != 1 {
		t.Fatalf("after restore: %+v events %d", r, len(rec.evs))
	}
	// Restoring equal bytes gives equal encodings.
	again, _ := a.f.MarshalBinary()
	if !bytes.Equal(again, s.Bytes()) {
		t.Fatal("snapshot is not deterministic")
	}
}

func TestRestoreRefusesCorruptAndKeepsState(t *testing.T) {
	a, _ := newApplier(t)
	a.do(Command{Op: OpAcquire, Now: 1, Key: "a", Holder: "h", TTL: 100})
	good, _ := a.f.MarshalBinary()
	b, _ := newApplier(t)
	b.do(Command{Op: OpAcquire, Now: 1, Key: "keep", Holder: "h", TTL: 100})
	for name, data := range map[string][]byte{
		"empty":     nil,
		"flipped":   append(append([]byte{}, good[:8]...), append([]byte{good[8] ^ 1}, good[9:]...)...),
		"truncated": good[:len(good)-1],
	} {
		if err := b.f.Restore(bytes.NewReader(data)); !errors.Is(err, ErrCorruptSnapshot) {
			t.Errorf("%s: %v, want ErrCorruptSnapshot", name, err)
		}
	}
	if _, ok := b.f.Get("keep", 2); !ok {
		t.Fatal("a failed restore changed the state")
	}
}

func TestChangedIsPoked(t *testing.T) {
	a, _ := newApplier(t)
	select {
	case <-a.f.Changed():
		t.Fatal("changed before any apply")
	default:
	}
	a.do(Command{Op: OpTick, Now: 1})
	a.do(Command{Op: OpTick, Now: 2})
	select {
	case <-a.f.Changed():
	default:
		t.Fatal("no change signal after apply")
	}
}

// FuzzRestore: a snapshot decoder never panics, refuses with
// ErrCorruptSnapshot, and what it accepts re-encodes to the same bytes.
func FuzzRestore(f *testing.F) {
	fsm := New(nil)
	f.Add([]byte{})
	empty, _ := fsm.MarshalBinary()
	f.Add(empty)
	fsm.ApplyCommand(1, Command{Op: OpAcquire, Now: 1, Key: "a", Holder: "h", TTL: 100})
	fsm.ApplyCommand(2, Command{Op: OpAcquire, Now: 2, Key: "b", Holder: "x", TTL: 100})
	fsm.ApplyCommand(3, Command{Op: OpWait, Now: 2, Key: "a", Holder: "w", TTL: 100, Deadline: 50})
	full, _ := fsm.MarshalBinary()
	f.Add(full)
	fsm.ApplyCommand(4, Command{Op: OpMember, NodeID: "n1", RaftAddr: "r", ClientAddr: "c"})
	fsm.ApplyCommand(5, Command{Op: OpMember, NodeID: "n2", RaftAddr: "r2", ClientAddr: "c2"})
	members, _ := fsm.MarshalBinary()
	f.Add(members)
	fsm.ApplyCommand(6, Command{Op: OpACL, ACL: &ACLChange{Kind: ACLBootstrap, Principal: acl.Principal{TokenHash: acl.HashToken("s")}}})
	fsm.ApplyCommand(7, Command{Op: OpACL, ACL: &ACLChange{Kind: ACLSetPrincipal, Principal: acl.Principal{Name: "node1", Policies: []string{"admin"}}}})
	acls, _ := fsm.MarshalBinary()
	f.Add(acls)
	f.Fuzz(func(t *testing.T, data []byte) {
		g := New(nil)
		if err := g.UnmarshalBinary(data); err != nil {
			if !errors.Is(err, ErrCorruptSnapshot) {
				t.Fatalf("error %v does not match ErrCorruptSnapshot", err)
			}
			return
		}
		again, _ := g.MarshalBinary()
		if !bytes.Equal(again, data) {
			t.Fatalf("accepted snapshot re-encodes differently:\n in %x\nout %x", data, again)
		}
	})
}
