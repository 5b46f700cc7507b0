package fsm

import (
	"errors"
	"reflect"
	"testing"

	"github.com/fencelock/fencelock/internal/locktable"
)

var sem3 = locktable.Shared{Kind: locktable.Semaphore, Permits: 3}

func TestSharedCommandRoundTrip(t *testing.T) {
	for _, c := range []Command{
		{Op: OpShared, Now: 1, Key: "s", Holder: "h", TTL: 10, Shared: sem3},
		{Op: OpShared, RequestID: "r", Now: 1, Key: "s", Holder: "h", TTL: 10, Deadline: 50,
			Shared: locktable.Shared{Kind: locktable.ReadWrite, Write: true}, MaxKeyWaiters: 7, MaxWaiters: 9},
		{Op: OpShared, Now: 1, Key: "s", Holder: "h", TTL: 10, Shared: locktable.Shared{Kind: locktable.Semaphore, Permits: locktable.MaxPermits}},
	} {
		b, err := Encode(c)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Decode(b)
		if err != nil || !reflect.DeepEqual(got, c) {
			t.Fatalf("round trip: %+v %v, want %+v", got, err, c)
		}
	}
	b, _ := Encode(Command{Op: OpShared, Key: "s", Holder: "h", TTL: 1, Shared: sem3})
	bad := append([]byte{}, b...)
	bad[len(bad)-1] = 2 // the write flag
	if _, err := Decode(bad); !errors.Is(err, ErrBadCommand) {
		t.Fatalf("write flag 2: %v", err)
	}
	if OpShared.String() != "shared-acquire" || Op(19).String() != "op(19)" {
		t.Fatalf("names: %s %s", OpShared, Op(19))
	}
}

// TestApplySemaphore: three permits, each its own token; the fourth holder
// queues and is granted in the same step as a release; a semaphore of
// another limit and an exclusive acquire are refused while it exists; the
// state survives a snapshot exactly.
func TestApplySemaphore(t *testing.T) {
	a, rec := newApplier(t)
	for i, h := range []string{"a", "b", "c"} {
		r := a.do(Command{Op: OpShared, Now: 1, Key: "s", Holder: h, TTL: 10 * sec, Shared: sem3})
		if r.Err != nil || !r.Granted || r.Lease.Token != uint64(i+1) || r.Lease.Permits != 3 {
			t.Fatalf("%s: %+v", h, r)
		}
	}
	r := a.do(Command{Op: OpShared, Now: 2, Key: "s", Holder: "d", TTL: 10 * sec, Deadline: 100 * tsec, Shared: sem3})
	if r.Err != nil || !r.Queued {
		t.Fatalf("d should queue: %+v", r)
	}
	r = a.do(Command{Op: OpShared, Now: 2, Key: "s", Holder: "e", TTL: sec, Shared: locktable.Shared{Kind: locktable.Semaphore, Permits: 4}})
	if !errors.Is(r.Err, locktable.ErrKindMismatch) {
		t.Fatalf("limit 4 on a 3-permit semaphore: %+v", r)
	}
	r = a.do(Command{Op: OpAcquire, Now: 2, Key: "s", Holder: "e", TTL: sec})
	if !errors.Is(r.Err, locktable.ErrKindMismatch) {
		t.Fatalf("exclusive on a semaphore: %+v", r)
	}
	r = a.do(Command{Op: OpWait, Now: 2, Key: "s", Holder: "e", TTL: sec, Deadline: 9 * tsec})
	if !errors.Is(r.Err, locktable.ErrKindMismatch) {
		t.Fatalf("exclusive wait on a semaphore: %+v", r)
	}
	back := restored(t, a.f)
	if got, want := back.Holders("s", 3), a.f.Holders("s", 3); !reflect.DeepEqual(got, want) || len(got) != 3 {
		t.Fatalf("restored holders %+v, want %+v", got, want)
	}
	if w := back.Waiters("s"); len(w) != 1 || w[0] != "d" {
		t.Fatalf("restored waiters %v", w)
	}
	rec.evs = nil
	r = a.do(Command{Op: OpRelease, Now: 3, Key: "s", Holder: "b", Token: 2})
	if !r.Released {
		t.Fatalf("release b: %+v", r)
	}
	if len(rec.evs) != 2 || rec.evs[1].ev.Kind != locktable.EventGranted || rec.evs[1].ev.Holder != "d" || rec.evs[1].ev.Token != 4 {
		t.Fatalf("hand-off events %+v", rec.evs)
	}
	if !a.f.Check("s", 4, 3) || a.f.Check("s", 2, 3) || !a.f.Check("s", 1, 3) {
		t.Fatal("check per token")
	}
	r = a.do(Command{Op: OpExtend, Now: 4, Key: "s", Holder: "d", Token: 4, TTL: 20 * sec})
	if r.Err != nil || r.Lease.Expiry != 4+20*tsec {
		t.Fatalf("extend d: %+v", r)
	}
}

// TestApplyReadWrite: readers share, a writer queues behind them, a reader
// that arrives after the writer queues behind it; the writer is granted
// when the last reader leaves, then the reader.
func TestApplyReadWrite(t *testing.T) {
	a, rec := newApplier(t)
	rd := locktable.Shared{Kind: locktable.ReadWrite}
	wr := locktable.Shared{Kind: locktable.ReadWrite, Write: true}
	for _, h := range []string{"r1", "r2"} {
		if r := a.do(Command{Op: OpShared, Now: 1, Key: "k", Holder: h, TTL: 10 * sec, Shared: rd}); !r.Granted {
			t.Fatalf("%s: %+v", h, r)
		}
	}
	if r := a.do(Command{Op: OpShared, Now: 1, Key: "k", Holder: "w", TTL: 10 * sec, Deadline: 60 * tsec, Shared: wr}); !r.Queued {
		t.Fatalf("w: %+v", r)
	}
	if r := a.do(Command{Op: OpShared, Now: 1, Key: "k", Holder: "r3", TTL: 10 * sec, Deadline: 60 * tsec, Shared: rd}); !r.Queued {
		t.Fatalf("r3 must queue behind the writer: %+v", r)
	}
	if r := a.do(Command{Op: OpShared, Now: 1, Key: "k", Holder: "r4", TTL: 10 * sec, Shared: rd}); !errors.Is(r.Err, locktable.ErrHeld) {
		t.Fatalf("r4 without wait must be refused: %+v", r)
	}
	rec.evs = nil
	a.do(Command{Op: OpRelease, Now: 2, Key: "k", Holder: "r1"})
	if len(rec.evs) != 1 {
		t.Fatalf("one reader left: %+v", rec.evs)
	}
	a.do(Command{Op: OpTick, Now: 11 * tsec}) // r2 expires
	hs := a.f.Holders("k", 11*tsec)
	if len(hs) != 1 || hs[0].Holder != "w" || !hs[0].Write {
		t.Fatalf("writer after the readers: %+v", hs)
	}
	a.do(Command{Op: OpRelease, Now: 12 * tsec, Key: "k", Holder: "w"})
	hs = a.f.Holders("k", 12*tsec)
	if len(hs) != 1 || hs[0].Holder != "r3" || hs[0].Write || hs[0].Token <= 3 {
		t.Fatalf("reader after the writer: %+v", hs)
	}
}

// TestResentSharedWait: a shared wait re-sent under its request id keeps
// its place while queued and is answered with the hand-off's grant, as an
// exclusive wait is; a kind mismatch is not remembered.
func TestResentSharedWait(t *testing.T) {
	a, _ := newApplier(t)
	one := locktable.Shared{Kind: locktable.Semaphore, Permits: 1}
	a.do(Command{Op: OpShared, Now: 1, Key: "s", Holder: "a", TTL: 10 * sec, Shared: one})
	w := Command{Op: OpShared, RequestID: "w1", Now: 1, Key: "s", Holder: "b", TTL: 10 * sec, Deadline: 60 * tsec, Shared: one}
	if r := a.do(w); !r.Queued {
		t.Fatalf("b: %+v", r)
	}
	a.do(Command{Op: OpRelease, Now: 2, Key: "s", Holder: "a"})
	w.Now = 3
	r := a.do(w)
	if !r.Duplicate || !r.Granted || r.Lease.Token != 2 {
		t.Fatalf("re-sent wait: %+v", r)
	}
	if r := restored(t, a.f).ApplyCommand(100, w); !r.Duplicate || r.Lease.Token != 2 {
		t.Fatalf("re-sent wait after a restore: %+v", r)
	}
	x := Command{Op: OpAcquire, RequestID: "x", Now: 3, Key: "s", Holder: "c", TTL: sec}
	if r := a.do(x); !errors.Is(r.Err, locktable.ErrKindMismatch) {
		t.Fatalf("exclusive: %+v", r)
	}
	a.do(Command{Op: OpRelease, Now: 4, Key: "s", Holder: "b"})
	x.Now = 5
	if r := a.do(x); r.Err != nil || r.Duplicate || !r.Granted {
		t.Fatalf("the exclusive retry once the key is free: %+v", r)
	}
}
