package service

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/clock"
	"github.com/fencelock/fencelock/internal/replica/replicatest"
)

// newTestServiceWith is newTestService with testConfig changed by edit
// first: a small queue cap or watch history that one test needs.
func newTestServiceWith(t *testing.T, edit func(*Config)) (*Service, *replicatest.Log, *clock.Fake) {
	t.Helper()
	fake := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	cfg := testConfig(fake)
	edit(&cfg)
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	log := replicatest.New("n1", s.FSM())
	s.Start(log)
	t.Cleanup(s.Close)
	waitReady(t, s)
	return s, log, fake
}

// waitReady waits for s to serve writes (a bound on a hang, not a timing).
func waitReady(t *testing.T, s *Service) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
}

// wantCode fails t unless err is an *Error with code, and returns it.
func wantCode(t *testing.T, err error, code string) *Error {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T), want code %s", err, err, code)
	}
	if e.Code != code {
		t.Fatalf("error %q code %s (field %q), want code %s", e.Message, e.Code, e.Field, code)
	}
	return e
}

// leaseAnswer is what an Acquire run in its own goroutine answered.
type leaseAnswer struct {
	l   api.Lease
	err error
}

// goAcquire runs Acquire in a goroutine; its answer comes on the channel.
// Every caller receives it (await) or ends ctx before the test ends, so no
// goroutine outlives the test.
func goAcquire(ctx context.Context, s *Service, req api.AcquireRequest) <-chan leaseAnswer {
	ch := make(chan leaseAnswer, 1)
	go func() {
		l, err := s.Acquire(ctx, "", req)
		ch <- leaseAnswer{l, err}
	}()
	return ch
}

// await is the answer on ch (a bound on a hang, not a timing).
func await(t *testing.T, what string, ch <-chan leaseAnswer) leaseAnswer {
	t.Helper()
	select {
	case a := <-ch:
		return a
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: never answered", what)
		return leaseAnswer{}
	}
}

// notYet fails t if ch has an answer already: a waiter that should still
// be queued. It cannot prove a negative; a hand-off bug is caught by the
// table's state, this only makes the failure clearer.
func notYet(t *testing.T, what string, ch <-chan leaseAnswer) {
	t.Helper()
	select {
	case a := <-ch:
		t.Fatalf("%s answered early: %+v %v", what, a.l, a.err)
	default:
	}
}

// queueWaiter starts a waiting Acquire and returns once its Wait is in the
// key's queue at position n (1-based), so that arrival order is queue
// order.
func queueWaiter(t *testing.T, ctx context.Context, s *Service, req api.AcquireRequest, n int) <-chan leaseAnswer {
	t.Helper()
	ch := goAcquire(ctx, s, req)
	eventually(t, req.Holder+" queued", func() bool { return len(s.Waiters(req.Key)) == n })
	return ch
}

// holderOf is the holder of key's live lease as applied, "" if none.
func holderOf(s *Service, key string) string {
	l, ok := s.fsm.Get(key, s.fsm.Now())
	if !ok {
		return ""
	}
	return l.Holder
}

// refusedWait is a waiting Acquire that must be answered without
// queueing: it fails t, instead of hanging, if the key's queue grows past
// queued (the waiters already there). ctx must end before the test does.
func refusedWait(t *testing.T, ctx context.Context, s *Service, req api.AcquireRequest, queued int) (api.Lease, error) {
	t.Helper()
	ch := goAcquire(ctx, s, req)
	var a leaseAnswer
	eventually(t, req.Holder+" answered", func() bool {
		select {
		case a = <-ch:
			return true
		default:
		}
		if q := s.Waiters(req.Key); len(q) > queued {
			t.Fatalf("%s was queued: %v", req.Holder, q)
		}
		return false
	})
	return a.l, a.err
}
