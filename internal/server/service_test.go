package server

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/fencelock/fencelock/api"
)

// The operations are called without HTTP: typed requests in, typed
// answers or an *Error out, a waiting caller that goes away is its
// context ending.
func TestServiceWithoutATransport(t *testing.T) {
	ts, fake := fakeClockServer(t)
	ctx := context.Background()
	l, err := ts.Acquire(ctx, "", api.AcquireRequest{Key: "k", Holder: "a", TTLMs: 10000})
	if err != nil || l.Holder != "a" || l.Token != 1 || l.TTLMs != 10000 || l.RemainingMs != 10000 {
		t.Fatalf("acquire: %+v %v", l, err)
	}
	_, err = ts.Acquire(ctx, "", api.AcquireRequest{Key: "k", Holder: "b", TTLMs: 10000})
	var e *Error
	if !errors.As(err, &e) || e.Code != api.CodeHeld || e.Holder != "a" || e.RemainingMs == nil || *e.RemainingMs != 10000 ||
		e.Status() != http.StatusConflict {
		t.Fatalf("acquire of a held key: %#v", err)
	}
	if _, err := ts.Renew(ctx, api.RenewRequest{Key: "k", Holder: "a"}); !errors.As(err, &e) || e.Code != api.CodeInvalid || e.Field != "ttl_ms" {
		t.Fatalf("renew without a TTL: %#v", err)
	}
	if _, err := ts.Get(ctx, "nothing"); !errors.As(err, &e) || e.Code != api.CodeNotFound {
		t.Fatalf("get of a free key: %#v", err)
	}

	// A waiter whose caller goes away leaves the queue.
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := ts.Acquire(wctx, "", api.AcquireRequest{Key: "k", Holder: "b", TTLMs: 10000, WaitMs: 60000})
		done <- err
	}()
	eventually(t, "b queued", func() bool { return ts.queued("k", "b") })
	cancel()
	if err := <-done; !errors.As(err, &e) || e.Code != api.CodeUnavailable {
		t.Fatalf("a waiter whose context ended: %#v", err)
	}
	eventually(t, "b gone from the queue", func() bool { return len(ts.Waiters("k")) == 0 })

	// A waiter still there is granted at expiry.
	go func() {
		_, err := ts.Acquire(ctx, "", api.AcquireRequest{Key: "k", Holder: "c", TTLMs: 10000, WaitMs: 60000})
		done <- err
	}()
	eventually(t, "c queued", func() bool { return ts.queued("k", "c") })
	fake.Advance(10 * time.Second)
	if err := <-done; err != nil {
		t.Fatalf("c's wait: %v", err)
	}
	got, err := ts.Get(ctx, "k")
	if err != nil || got.Holder != "c" || got.Token != 2 {
		t.Fatalf("after expiry: %+v %v", got, err)
	}
	if c, err := ts.Check(ctx, "k", 2); err != nil || !c.Valid {
		t.Fatalf("check: %+v %v", c, err)
	}
	if r, err := ts.Release(ctx, api.ReleaseRequest{Key: "k", Holder: "c"}); err != nil || !r.Released {
		t.Fatalf("release: %+v %v", r, err)
	}
	if list, err := ts.List(ctx, "", 0); err != nil || len(list.Locks) != 0 {
		t.Fatalf("list: %+v %v", list, err)
	}
	if err := ts.CheckReady(ctx); err != nil {
		t.Fatalf("ready: %v", err)
	}
	if id := ts.Identity(ctx); id.Node != DefaultConfig().NodeID || id.Raft {
		t.Fatalf("identity: %+v", id)
	}
	if _, err := ts.Join(ctx, api.JoinRequest{ID: "n2", RaftAddr: "h:1", ClientAddr: "h:2"}); !errors.As(err, &e) || e.Code != api.CodeNoRaft {
		t.Fatalf("join on a node without raft: %#v", err)
	}
}
