package fsm

import (
	"bytes"
	"errors"
	"math"
	"testing"

	"github.com/fencelock/fencelock/internal/locktable"
)

// restored is f through a snapshot and a Restore into a new FSM.
func restored(t *testing.T, f *FSM) *FSM {
	t.Helper()
	b, err := f.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	back := New(nil)
	if err := back.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	return back
}

// TestFarFutureStampIsRefused: a command whose cluster time is near the
// int64 limit (a forged entry) is refused on apply, changing nothing: the
// clock does not move, no lease expires, and later acquires work; the same
// after a snapshot and restore. Before the check, the stamp was taken:
// every lease expired and every later acquire failed with "now+ttl
// overflows the clock", for good.
func TestFarFutureStampIsRefused(t *testing.T) {
	for _, forged := range []locktable.Time{math.MaxInt64 - 1, MaxClockTime + 1, 3 * locktable.Time(MaxClockStep)} {
		for _, viaSnapshot := range []bool{false, true} {
			a, _ := newApplier(t)
			if r := a.do(Command{Op: OpAcquire, Now: tsec, Key: "held", Holder: "h", TTL: 10 * sec}); r.Err != nil {
				t.Fatal(r.Err)
			}
			if viaSnapshot {
				a.f = restored(t, a.f)
			}
			before, _ := a.f.table.MarshalBinary()
			for _, op := range []Command{
				{Op: OpTick, Now: forged},
				{Op: OpAcquire, Now: forged, Key: "other", Holder: "x", TTL: sec},
				{Op: OpRelease, Now: forged, Key: "held", Holder: "h"},
			} {
				r := a.do(op)
				if !errors.Is(r.Err, ErrClockStep) || r.Granted || r.Released {
					t.Fatalf("forged %d, snapshot %v: %v answered %+v; want ErrClockStep", forged, viaSnapshot, op.Op, r)
				}
			}
			if after, _ := a.f.table.MarshalBinary(); a.f.Now() != tsec || !bytes.Equal(before, after) {
				t.Fatalf("forged %d: a refused stamp changed the state (now %d)", forged, a.f.Now())
			}
			if _, ok := a.f.Get("held", 2*tsec); !ok {
				t.Fatalf("forged %d: the lease is gone", forged)
			}
			r := a.do(Command{Op: OpAcquire, Now: 2 * tsec, Key: "later", Holder: "x", TTL: 10 * sec})
			if r.Err != nil || !r.Granted {
				t.Fatalf("forged %d: a later acquire: %+v", forged, r)
			}
			if back := restored(t, a.f); back.Now() != 2*tsec {
				t.Fatalf("forged %d: restored clock %d", forged, back.Now())
			}
		}
	}
}

// TestClockSteps: within MaxClockStep any stamp is taken, with leases
// held or not; an empty table (nothing held, nobody queued: no lease to
// expire) takes a jump of up to MaxIdleClockStep, which a leader that
// proposed nothing for months makes legitimately; a stamp behind the
// clock is taken as the clock, as before.
func TestClockSteps(t *testing.T) {
	a, _ := newApplier(t)
	step := locktable.Time(MaxClockStep)
	if r := a.do(Command{Op: OpAcquire, Now: step, Key: "k", Holder: "h", TTL: 3 * MaxClockStep}); r.Err != nil {
		t.Fatalf("a step of MaxClockStep from 0 with the table empty: %v", r.Err)
	}
	if r := a.do(Command{Op: OpTick, Now: 2 * step}); r.Err != nil || a.f.Now() != 2*step {
		t.Fatalf("a step of MaxClockStep with a lease held: %v, now %d", r.Err, a.f.Now())
	}
	if r := a.do(Command{Op: OpTick, Now: 3*step + 1}); !errors.Is(r.Err, ErrClockStep) {
		t.Fatalf("a step beyond MaxClockStep with a lease record: %v", r.Err)
	}
	if r := a.do(Command{Op: OpTick, Now: step}); r.Err != nil || r.Now != 2*step {
		t.Fatalf("a stamp behind the clock: %+v", r)
	}
	for _, at := range []locktable.Time{3 * step, 4 * step} {
		if r := a.do(Command{Op: OpTick, Now: at}); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	// The lease expired at the last tick: the table is empty now.
	if a.f.table.Len() != 0 {
		t.Fatalf("table has %d entries", a.f.table.Len())
	}
	idle := 4*step + locktable.Time(MaxIdleClockStep)
	if r := a.do(Command{Op: OpAcquire, Now: idle, Key: "k", Holder: "h", TTL: 10 * sec}); r.Err != nil || !r.Granted {
		t.Fatalf("an idle jump of MaxIdleClockStep: %+v", r)
	}
	if r := a.do(Command{Op: OpTick, Now: idle + locktable.Time(MaxIdleClockStep)}); !errors.Is(r.Err, ErrClockStep) {
		t.Fatalf("an idle-sized jump with a lease held: %v", r.Err)
	}
}
