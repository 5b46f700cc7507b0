package service

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/fencelock/fencelock/api"
)

// A semaphore grants up to its permits, each holder a free slot and a
// token of its own; one more waits, and a freed permit goes to it with
// the freed slot.
func TestSemaphorePermitsAndSlots(t *testing.T) {
	s, _, fake := newTestService(t)
	ctx := context.Background()
	sem := func(h string, waitMs int64) api.AcquireRequest {
		return api.AcquireRequest{Key: "sem", Holder: h, TTLMs: 10000, Permits: 2, WaitMs: waitMs}
	}
	a := mustAcquire(t, s, sem("a", 0))
	b := mustAcquire(t, s, sem("b", 0))
	if a.Kind != api.KindSemaphore || a.Permits != 2 || a.Slot != 1 || b.Slot != 2 || b.Token != a.Token+1 {
		t.Fatalf("permits: %+v %+v; want slots 1 and 2 of a 2-permit semaphore", a, b)
	}
	_, err := s.Acquire(ctx, "", sem("c", 0))
	wantCode(t, err, api.CodeHeld)
	c := queueWaiter(t, ctx, s, sem("c", 60000), 1)
	got, err := s.Get(ctx, "sem")
	if err != nil || len(got.Holders) != 2 || got.Holders[0].Holder != "a" || got.Holders[1].Holder != "b" {
		t.Fatalf("get: %+v %v; want holders a and b", got, err)
	}
	// b keeps its permit by extending it; a's runs out and goes to c.
	fake.Advance(5 * time.Second)
	if _, err := s.Extend(ctx, api.ExtendRequest{Key: "sem", Holder: "b", Token: b.Token, TTLMs: 10000}); err != nil {
		t.Fatal(err)
	}
	fake.Advance(5 * time.Second)
	cg := await(t, "c", c)
	if cg.err != nil || cg.l.Holder != "c" || cg.l.Slot != 1 || cg.l.Token != b.Token+1 || cg.l.Kind != api.KindSemaphore {
		t.Fatalf("c: %+v %v; want a's slot 1 with the next token", cg.l, cg.err)
	}
	if ck, _ := s.Check(ctx, "sem", b.Token); !ck.Valid {
		t.Fatal("b's extended permit is not valid")
	}
	if ck, _ := s.Check(ctx, "sem", a.Token); ck.Valid {
		t.Fatal("a's expired permit is still valid")
	}
	if r, _ := s.Release(ctx, api.ReleaseRequest{Key: "sem", Holder: "b", Token: b.Token}); !r.Released {
		t.Fatal("b's release")
	}
	if d := mustAcquire(t, s, sem("d", 0)); d.Slot != 2 {
		t.Fatalf("d took slot %d, want b's freed slot 2", d.Slot)
	}
}

// Readers share a read/write lock, a writer excludes every other holder,
// and the queue is FIFO across kinds: a reader that comes after a queued
// writer waits behind it instead of overtaking it.
func TestReadWriteLockReadersShareWriterExcludesFIFO(t *testing.T) {
	s, _, _ := newTestService(t)
	ctx := context.Background()
	rw := func(h, mode string, waitMs int64) api.AcquireRequest {
		return api.AcquireRequest{Key: "rw", Holder: h, TTLMs: 60000, Mode: mode, WaitMs: waitMs}
	}
	r1 := mustAcquire(t, s, rw("r1", api.ModeRead, 0))
	r2 := mustAcquire(t, s, rw("r2", api.ModeRead, 0))
	if r1.Kind != api.KindRWLock || r1.Mode != api.ModeRead || r2.Token != r1.Token+1 {
		t.Fatalf("readers: %+v %+v", r1, r2)
	}
	_, err := s.Acquire(ctx, "", rw("w", api.ModeWrite, 0))
	wantCode(t, err, api.CodeHeld)
	w := queueWaiter(t, ctx, s, rw("w", api.ModeWrite, 60000), 1)
	r3 := queueWaiter(t, ctx, s, rw("r3", api.ModeRead, 60000), 2)
	if got := s.Waiters("rw"); !slices.Equal(got, []string{"w", "r3"}) {
		t.Fatalf("queue %v, want [w r3]", got)
	}
	s.Release(ctx, api.ReleaseRequest{Key: "rw", Holder: "r1"})
	notYet(t, "w with a reader left", w)
	notYet(t, "r3 behind the writer", r3)
	s.Release(ctx, api.ReleaseRequest{Key: "rw", Holder: "r2"})
	wg := await(t, "w", w)
	if wg.err != nil || wg.l.Holder != "w" || wg.l.Mode != api.ModeWrite {
		t.Fatalf("w: %+v %v", wg.l, wg.err)
	}
	_, err = s.Acquire(ctx, "", rw("r4", api.ModeRead, 0))
	wantCode(t, err, api.CodeHeld)
	notYet(t, "r3 while the writer holds", r3)
	s.Release(ctx, api.ReleaseRequest{Key: "rw", Holder: "w", Token: wg.l.Token})
	if g := await(t, "r3", r3); g.err != nil || g.l.Holder != "r3" || g.l.Mode != api.ModeRead || g.l.Token != wg.l.Token+1 {
		t.Fatalf("r3: %+v %v", g.l, g.err)
	}
}

// While a key has holders it is of one kind: a request of another kind,
// or a semaphore of another limit, is refused kind_mismatch saying what
// the key is; once the key is free it may become another kind.
func TestKindMismatch(t *testing.T) {
	s, _, _ := newTestService(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sem := mustAcquire(t, s, api.AcquireRequest{Key: "sem", Holder: "a", TTLMs: 60000, Permits: 3})
	mustAcquire(t, s, api.AcquireRequest{Key: "ex", Holder: "a", TTLMs: 60000})
	mustAcquire(t, s, api.AcquireRequest{Key: "rw", Holder: "a", TTLMs: 60000, Mode: api.ModeRead})
	for _, c := range []struct {
		req     api.AcquireRequest
		kind    string
		permits int
	}{
		{api.AcquireRequest{Key: "sem", Holder: "b", TTLMs: 1000}, api.KindSemaphore, 3},
		{api.AcquireRequest{Key: "sem", Holder: "b", TTLMs: 1000, Permits: 2}, api.KindSemaphore, 3},
		{api.AcquireRequest{Key: "sem", Holder: "b", TTLMs: 1000, Mode: api.ModeRead}, api.KindSemaphore, 3},
		{api.AcquireRequest{Key: "ex", Holder: "b", TTLMs: 1000, Permits: 2}, api.KindExclusive, 0},
		{api.AcquireRequest{Key: "ex", Holder: "b", TTLMs: 1000, Mode: api.ModeWrite, WaitMs: 1000}, api.KindExclusive, 0},
		{api.AcquireRequest{Key: "rw", Holder: "b", TTLMs: 1000}, api.KindRWLock, 0},
		{api.AcquireRequest{Key: "rw", Holder: "b", TTLMs: 1000, Permits: 2}, api.KindRWLock, 0},
	} {
		_, err := refusedWait(t, ctx, s, c.req, 0)
		e := wantCode(t, err, api.CodeKindMismatch)
		if e.Kind != c.kind || e.Permits != c.permits {
			t.Fatalf("%+v: refused as %s of %d permits, want %s of %d", c.req, e.Kind, e.Permits, c.kind, c.permits)
		}
	}
	if got := s.Waiters("ex"); len(got) != 0 {
		t.Fatalf("a refused wait queued: %v", got)
	}
	s.Release(ctx, api.ReleaseRequest{Key: "sem", Holder: "a", Token: sem.Token})
	if l := mustAcquire(t, s, api.AcquireRequest{Key: "sem", Holder: "b", TTLMs: 1000}); l.Kind != "" {
		t.Fatalf("the freed key as an exclusive lock: %+v", l)
	}
}
