package server

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencelock/fencelock/api"
)

// A grant handed to a waiter from the queue is answered only once the
// token ceiling covers its token, as a proposer's own grant is: when the
// reservation fails, the waiter is refused, not given a token that a
// damaged disk could let the node issue again.
func TestWaiterGrantNeedsTheCeiling(t *testing.T) {
	ts := startServer(t, fastConfig(t.TempDir()))
	ctx := context.Background()
	a, err := ts.Acquire(ctx, api.AcquireRequest{Key: "k", Holder: "a", TTLMs: 60000})
	if err != nil {
		t.Fatal(err)
	}
	type answer struct {
		l   api.Lease
		err error
	}
	done := make(chan answer, 1)
	go func() {
		l, err := ts.Acquire(ctx, api.AcquireRequest{Key: "k", Holder: "b", TTLMs: 60000, WaitMs: 60000})
		done <- answer{l, err}
	}()
	eventually(t, "b queued", func() bool { return len(ts.Waiters("k")) == 1 })
	// The next token needs a new reservation, and the state file fails it.
	ts.node.floor.ceiling.Store(a.Token)
	ts.node.floor.raiseHook = func(uint64) error { return errors.New("planted fsync failure") }
	ts.Release(ctx, api.ReleaseRequest{Key: "k", Holder: "a", Token: a.Token}) // refused too: the node cannot answer writes
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
