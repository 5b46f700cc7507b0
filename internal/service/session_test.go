package service

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/api"
)

// A session's locks live as long as it does: extending the session keeps
// them, a lock under it is not extended by itself, and at the session's
// expiry the leader's tick ends every one of them in one committed step.
func TestSessionLocksAreLostTogetherAtItsExpiry(t *testing.T) {
	s, _, fake := newTestService(t)
	ctx := context.Background()
	ss, err := s.OpenSession(ctx, "", api.SessionOpenRequest{Holder: "a", TTLMs: 2000})
	if err != nil {
		t.Fatal(err)
	}
	if ss.ID == 0 || ss.Holder != "a" || ss.TTLMs != 2000 || ss.RemainingMs != 2000 {
		t.Fatalf("opened %+v", ss)
	}
	var leases []api.Lease
	for _, k := range []string{"x", "y"} {
		l := mustAcquire(t, s, api.AcquireRequest{Key: k, Holder: "a", Session: ss.ID})
		if l.Session != ss.ID || l.TTLMs != 2000 || l.RemainingMs != 2000 {
			t.Fatalf("lock under the session: %+v", l)
		}
		leases = append(leases, l)
	}
	_, err = s.Extend(ctx, api.ExtendRequest{Key: "x", Holder: "a", Token: leases[0].Token, TTLMs: 60000})
	wantCode(t, err, api.CodeNotHeld)

	fake.Advance(1500 * time.Millisecond)
	ext, err := s.ExtendSession(ctx, api.SessionRequest{ID: ss.ID, Holder: "a"})
	if err != nil || ext.RemainingMs != 2000 || ext.Locks != 2 {
		t.Fatalf("extend session: %+v %v; want 2000 ms left and 2 locks", ext, err)
	}
	fake.Advance(1500 * time.Millisecond) // past the first expiry
	for _, l := range leases {
		if c, _ := s.Check(ctx, l.Key, l.Token); !c.Valid {
			t.Fatalf("%s lost although its session was extended", l.Key)
		}
	}

	rev := s.Revision()
	fake.Advance(500 * time.Millisecond)
	w, err := s.Watch(ctx, api.WatchRequest{After: &rev, WaitMs: 60000}, WatchScope{})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "both expiries", func() bool {
		if len(w.Events) >= 2 {
			return true
		}
		more, err := s.Watch(ctx, api.WatchRequest{After: &w.Revision}, WatchScope{})
		if err != nil {
			t.Fatal(err)
		}
		w.Events, w.Revision = append(w.Events, more.Events...), more.Revision
		return false
	})
	if len(w.Events) != 2 {
		t.Fatalf("events at the session's expiry: %+v", w.Events)
	}
	for i, ev := range w.Events {
		if ev.Type != api.WatchExpired || ev.Key != leases[i].Key || ev.Token != leases[i].Token {
			t.Fatalf("event %d %+v; want %s's expiry", i, ev, leases[i].Key)
		}
	}
	if w.Events[0].Revision.Index != w.Events[1].Revision.Index {
		t.Fatalf("the session's locks ended in two entries: %+v", w.Events)
	}
	_, err = s.ExtendSession(ctx, api.SessionRequest{ID: ss.ID, Holder: "a"})
	wantCode(t, err, api.CodeNoSession)
	_, err = s.Acquire(ctx, "", api.AcquireRequest{Key: "z", Holder: "a", Session: ss.ID})
	wantCode(t, err, api.CodeNoSession)
}

// Closing a session releases its locks and hands each to its head
// waiter at once; the answer says how many it released.
func TestCloseSessionReleasesAndHandsOff(t *testing.T) {
	s, _, _ := newTestService(t)
	ctx := context.Background()
	ss, err := s.OpenSession(ctx, "", api.SessionOpenRequest{Holder: "a", TTLMs: 60000})
	if err != nil {
		t.Fatal(err)
	}
	x := mustAcquire(t, s, api.AcquireRequest{Key: "x", Holder: "a", Session: ss.ID})
	mustAcquire(t, s, api.AcquireRequest{Key: "y", Holder: "a", Session: ss.ID})
	b := queueWaiter(t, ctx, s, api.AcquireRequest{Key: "x", Holder: "b", TTLMs: 1000, WaitMs: 60000}, 1)
	closed, err := s.CloseSession(ctx, api.SessionRequest{ID: ss.ID, Holder: "a"})
	if err != nil || closed.Locks != 2 || closed.RemainingMs != 0 {
		t.Fatalf("close: %+v %v; want 2 locks released", closed, err)
	}
	if got := await(t, "b", b); got.err != nil || got.l.Holder != "b" || got.l.Token <= x.Token {
		t.Fatalf("b after the close: %+v %v", got.l, got.err)
	}
	_, err = s.Get(ctx, "y")
	wantCode(t, err, api.CodeNotFound)
	_, err = s.CloseSession(ctx, api.SessionRequest{ID: ss.ID, Holder: "a"})
	wantCode(t, err, api.CodeNoSession)
}

// A session is its holder's: another holder can neither extend it, close
// it, nor take locks under it, and the refusals change nothing.
func TestSessionOfAnotherHolderIsNoSession(t *testing.T) {
	s, _, _ := newTestService(t)
	ctx := context.Background()
	ss, err := s.OpenSession(ctx, "", api.SessionOpenRequest{Holder: "a", TTLMs: 60000})
	if err != nil {
		t.Fatal(err)
	}
	mustAcquire(t, s, api.AcquireRequest{Key: "x", Holder: "a", Session: ss.ID})
	_, err = s.ExtendSession(ctx, api.SessionRequest{ID: ss.ID, Holder: "b"})
	wantCode(t, err, api.CodeNoSession)
	_, err = s.CloseSession(ctx, api.SessionRequest{ID: ss.ID, Holder: "b"})
	wantCode(t, err, api.CodeNoSession)
	_, err = s.Acquire(ctx, "", api.AcquireRequest{Key: "y", Holder: "b", Session: ss.ID})
	wantCode(t, err, api.CodeNoSession)
	_, err = s.AcquireAll(ctx, "", api.AcquireAllRequest{Keys: []string{"y", "z"}, Holder: "b", Session: ss.ID})
	wantCode(t, err, api.CodeNoSession)
	_, err = s.ExtendSession(ctx, api.SessionRequest{ID: ss.ID + 1, Holder: "a"})
	wantCode(t, err, api.CodeNoSession)
	if got, err := s.ExtendSession(ctx, api.SessionRequest{ID: ss.ID, Holder: "a"}); err != nil || got.Locks != 1 {
		t.Fatalf("the owner's session after the refusals: %+v %v", got, err)
	}
	for _, k := range []string{"y", "z"} {
		if _, err := s.Get(ctx, k); err == nil {
			t.Fatalf("%s was granted under another holder's session", k)
		}
	}
}

// A waiter under a session whose session expires while it waits is
// answered no_session, not held.
func TestWaitUnderASessionEndsWithIt(t *testing.T) {
	s, _, fake := newTestService(t)
	ctx := context.Background()
	mustAcquire(t, s, api.AcquireRequest{Key: "k", Holder: "a", TTLMs: 60000})
	ss, err := s.OpenSession(ctx, "", api.SessionOpenRequest{Holder: "b", TTLMs: 1000})
	if err != nil {
		t.Fatal(err)
	}
	w := queueWaiter(t, ctx, s, api.AcquireRequest{Key: "k", Holder: "b", Session: ss.ID, WaitMs: 30000}, 1)
	fake.Advance(time.Second)
	wantCode(t, await(t, "b", w).err, api.CodeNoSession)
	if got := s.Waiters("k"); len(got) != 0 {
		t.Fatalf("queue %v after b's session ended", got)
	}
}

// A multi-key acquire grants every key in one command, each with its own
// token, or none: a key in the way is named and the others stay free.
func TestAcquireAllIsAllOrNone(t *testing.T) {
	s, log, _ := newTestService(t)
	ctx := context.Background()
	y := mustAcquire(t, s, api.AcquireRequest{Key: "y", Holder: "other", TTLMs: 60000})
	before := s.fsm.LastToken()
	_, err := s.AcquireAll(ctx, "", api.AcquireAllRequest{Keys: []string{"x", "y", "z"}, Holder: "a", TTLMs: 60000})
	e := wantCode(t, err, api.CodeHeld)
	if e.Holder != "other" {
		t.Fatalf("held answer names %q, want other", e.Holder)
	}
	var ke *KeyedError
	if !errors.As(err, &ke) || ke.Key != "y" {
		t.Fatalf("the refusal does not say y is in the way: %#v", err)
	}
	for _, k := range []string{"x", "z"} {
		if _, err := s.Get(ctx, k); err == nil {
			t.Fatalf("%s was granted by a refused multi-key acquire", k)
		}
	}
	if s.fsm.LastToken() != before {
		t.Fatal("a refused multi-key acquire took tokens")
	}

	s.Release(ctx, api.ReleaseRequest{Key: "y", Holder: "other", Token: y.Token})
	idx := log.AppliedIndex()
	r, err := s.AcquireAll(ctx, "", api.AcquireAllRequest{Keys: []string{"x", "y", "z"}, Holder: "a", TTLMs: 60000})
	if err != nil {
		t.Fatal(err)
	}
	if log.AppliedIndex() != idx+1 {
		t.Fatalf("a multi-key acquire took %d entries, want one", log.AppliedIndex()-idx)
	}
	var keys []string
	for i, l := range r.Locks {
		keys = append(keys, l.Key)
		if l.Holder != "a" || l.Token != before+uint64(i)+1 || l.RemainingMs != 60000 {
			t.Fatalf("lock %d %+v; want token %d", i, l, before+uint64(i)+1)
		}
	}
	if !slices.Equal(keys, []string{"x", "y", "z"}) {
		t.Fatalf("granted %v", keys)
	}
}

// An open and a close re-sent with their request ids (a client whose
// answer was lost) are answered as the first were: one session, and a
// close that is not refused as no_session. A request id over the limit
// is refused before anything is proposed.
func TestSessionOpenAndCloseRetriedByRequestID(t *testing.T) {
	s, _, _ := newTestService(t)
	ctx := context.Background()
	open := api.SessionOpenRequest{Holder: "a", TTLMs: 60000, RequestID: "open-1"}
	first, err := s.OpenSession(ctx, "", open)
	if err != nil {
		t.Fatal(err)
	}
	again, err := s.OpenSession(ctx, "", open)
	if err != nil || again.ID != first.ID {
		t.Fatalf("re-sent open: %+v %v; want session %d", again, err, first.ID)
	}
	mustAcquire(t, s, api.AcquireRequest{Key: "x", Holder: "a", Session: first.ID})
	closeReq := api.SessionRequest{ID: first.ID, Holder: "a", RequestID: "close-1"}
	for i := range 2 {
		if closed, err := s.CloseSession(ctx, closeReq); err != nil || closed.Locks != 1 {
			t.Fatalf("close #%d: %+v %v; want 1 lock released", i+1, closed, err)
		}
	}
	_, err = s.CloseSession(ctx, api.SessionRequest{ID: first.ID, Holder: "a", RequestID: "close-2"})
	wantCode(t, err, api.CodeNoSession)
	_, err = s.OpenSession(ctx, "", api.SessionOpenRequest{Holder: "a", TTLMs: 60000, RequestID: strings.Repeat("r", api.MaxRequestIDLen+1)})
	if e := wantCode(t, err, api.CodeInvalid); e.Field != "request_id" {
		t.Fatalf("a long request id: field %q", e.Field)
	}
}
