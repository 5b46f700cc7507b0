package service

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/locktable"
)

func mustAcquire(t *testing.T, s *Service, req api.AcquireRequest) api.Lease {
	t.Helper()
	l, err := s.Acquire(context.Background(), "", req)
	if err != nil {
		t.Fatalf("acquire %+v: %v", req, err)
	}
	return l
}

// A waiter whose caller goes away leaves the queue, and nothing is
// handed to it afterwards.
func TestDisconnectedWaiterLeavesQueue(t *testing.T) {
	s, _, _ := newTestService(t)
	mustAcquire(t, s, api.AcquireRequest{Key: "k", Holder: "a", TTLMs: 60000})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Acquire(ctx, "", api.AcquireRequest{Key: "k", Holder: "b", TTLMs: 1000, WaitMs: 60000})
	}()
	eventually(t, "b queued", func() bool { return len(s.fsm.Waiters("k")) == 1 })
	cancel()
	<-done
	eventually(t, "b gone from the queue", func() bool { return len(s.fsm.Waiters("k")) == 0 })
	eventually(t, "no waiter registered", func() bool { return !s.waiters.has("k", "b") })
	// The lease is untouched and a later release hands to nobody.
	if r, err := s.Release(context.Background(), api.ReleaseRequest{Key: "k", Holder: "a"}); err != nil || !r.Released {
		t.Fatalf("release: %+v %v", r, err)
	}
	if _, ok := s.fsm.Get("k", s.fsm.Now()); ok {
		t.Fatal("the key was handed to a waiter that left")
	}
}

// The race the package comment describes: the grant commits just before the
// waiter's cancel. A waiter that is gone must not keep the lease.
func TestGrantRacingGiveUpIsReleased(t *testing.T) {
	s, _, _ := newTestService(t)
	mustAcquire(t, s, api.AcquireRequest{Key: "k", Holder: "a", TTLMs: 60000})
	sub := s.waiters.join("k", "b")
	now, _ := s.stamp()
	res, err := s.apply(fsm.Command{Op: fsm.OpWait, Now: now, Key: "k", Holder: "b", TTL: locktable.Second * 60, Deadline: now + locktable.Time(time.Hour)})
	if err != nil || !res.Queued {
		t.Fatalf("wait: %+v %v", res, err)
	}
	// Another waiter queues behind b, then a releases: b is granted.
	s.propose(fsm.Command{Op: fsm.OpWait, Key: "k", Holder: "c", TTL: locktable.Second * 60, Deadline: now + locktable.Time(time.Hour)})
	s.Release(context.Background(), api.ReleaseRequest{Key: "k", Holder: "a"})
	if l, ok := s.fsm.Get("k", s.fsm.Now()); !ok || l.Holder != "b" {
		t.Fatalf("b not granted: %+v", l)
	}
	// b gives up having seen nothing (its client disconnected).
	if _, e := s.giveUp(sub, "", res.Index, true, Unavailable("gone")); e == nil {
		t.Fatal("giveUp answered nothing")
	}
	l, ok := s.fsm.Get("k", s.fsm.Now())
	if !ok || l.Holder != "c" {
		t.Fatalf("b's grant was not released to c: %+v %v", l, ok)
	}
}

// A waiter told that leadership was lost no longer holds its queue place
// for a new leader: otherwise the place would be granted to nobody.
func TestFailedWaitersDoNotKeepTheirPlace(t *testing.T) {
	r := newWaitRegistry(func(int) {})
	s := r.join("k", "h")
	if !r.has("k", "h") {
		t.Fatal("a joined waiter is not seen")
	}
	r.failAll()
	if r.has("k", "h") {
		t.Fatal("a failed waiter still counts as served")
	}
	r.remove(s)
}

// A client leaves a node it thinks stuck and re-sends its wait; the
// departed request's CancelWait lands after the re-sent Wait joined the
// same queue place. The live request queues again instead of waiting for
// a grant that cannot come.
func TestStaleCancelOfAResentWaitQueuesItAgain(t *testing.T) {
	s, _, _ := newTestService(t)
	mustAcquire(t, s, api.AcquireRequest{Key: "k", Holder: "x", TTLMs: 60000, RequestID: "x1"})
	type answer struct {
		l   api.Lease
		err error
	}
	got := make(chan answer, 1)
	go func() {
		l, err := s.Acquire(context.Background(), "", api.AcquireRequest{Key: "k", Holder: "w", TTLMs: 60000, WaitMs: 60000, RequestID: "id-w"})
		got <- answer{l, err}
	}()
	eventually(t, "w to queue", func() bool { return len(s.fsm.Waiters("k")) == 1 })
	// What the departed request's giveUp proposes, late.
	if res, err := s.cancelWait(waitKey{"k", "w"}); err != nil || res.Cancelled != 1 {
		t.Fatalf("cancel: %+v %v", res, err)
	}
	eventually(t, "w to queue again", func() bool { return len(s.fsm.Waiters("k")) == 1 })
	if r, err := s.Release(context.Background(), api.ReleaseRequest{Key: "k", Holder: "x"}); err != nil || !r.Released {
		t.Fatalf("release x: %+v %v", r, err)
	}
	select {
	case a := <-got:
		if a.err != nil || a.l.Holder != "w" || a.l.Token != 2 {
			t.Fatalf("w: %+v %v; want the grant, token 2", a.l, a.err)
		}
	case <-time.After(20 * time.Second): // a bound on a hang, not a timing
		t.Fatal("w was never granted")
	}
}

// A grant handed to a waiter from the queue is answered only once the
// node can vouch for its token (replica.Replicator.Covered), as a proposer's
// own grant is: when it cannot, the waiter is refused, not given a token
// that a damaged disk could let the node issue again.
func TestWaiterGrantNeedsTheCeiling(t *testing.T) {
	s, log, _ := newTestService(t)
	ctx := context.Background()
	a := mustAcquire(t, s, api.AcquireRequest{Key: "k", Holder: "a", TTLMs: 60000})
	type answer struct {
		l   api.Lease
		err error
	}
	done := make(chan answer, 1)
	go func() {
		l, err := s.Acquire(ctx, "", api.AcquireRequest{Key: "k", Holder: "b", TTLMs: 60000, WaitMs: 60000})
		done <- answer{l, err}
	}()
	eventually(t, "b queued", func() bool { return len(s.fsm.Waiters("k")) == 1 })
	log.FailCovered(errors.New("planted fsync failure"))
	s.Release(ctx, api.ReleaseRequest{Key: "k", Holder: "a", Token: a.Token})
	var got answer
	select {
	case got = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the waiter was never answered")
	}
	var e *Error
	if got.err == nil || !errors.As(got.err, &e) || e.Code != api.CodeUnavailable {
		t.Fatalf("the waiter's grant past a failed reservation was answered: %+v %v", got.l, got.err)
	}
}
