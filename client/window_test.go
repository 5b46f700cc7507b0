package client_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock/client"
)

// TestThousandsOfWaitsDoNotStarveExtends: with 1,100 waits queued from one
// client — more than one connection's window — the same client's extends
// and releases still go through, and every wait is queued. Before, the
// waits shared one framed connection: past 1,024 in flight the server
// stopped reading it, and the extends behind them never arrived (the
// client lost a 3 s lease).
func TestThousandsOfWaitsDoNotStarveExtends(t *testing.T) {
	addr := realServer(t)
	c, err := client.New([]string{addr})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// Over four keys: a key queues at most 1,000 waiters by default.
	const keys = 4
	for k := range keys {
		if _, err := c.Grant(ctx, fmt.Sprintf("busy/%d", k), "owner", time.Hour, 0); err != nil {
			t.Fatal(err)
		}
	}
	mine, err := c.Grant(ctx, "mine", "me", time.Hour, 0)
	if err != nil {
		t.Fatal(err)
	}

	const waits = 1100
	wctx, stopWaits := context.WithCancel(ctx)
	var (
		wg     sync.WaitGroup
		failed = make(chan error, waits)
	)
	for i := range waits {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.Grant(wctx, fmt.Sprintf("busy/%d", i%keys), fmt.Sprintf("w%d", i), time.Minute, time.Hour); err != nil && wctx.Err() == nil {
				failed <- fmt.Errorf("wait w%d: %w", i, err)
			}
		}()
	}
	// A wait that fails outright is a bug of its own: say which.
	queued := func(want int) {
		t.Helper()
		for n := waiters(t, addr); n < want; n = waiters(t, addr) {
			select {
			case err := <-failed:
				t.Fatalf("%d of %d waits queued; %v", n, waits, err)
			default:
			}
			if ctx.Err() != nil {
				t.Fatalf("%d of %d waits were queued", n, waits)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	defer func() {
		stopWaits()
		wg.Wait()
	}()
	// At least one connection's window of waits is out before the extend.
	queued(1024)
	ectx, ecancel := context.WithTimeout(ctx, 10*time.Second)
	defer ecancel()
	if _, err := c.Extend(ectx, "mine", "me", mine.Token, time.Hour); err != nil {
		t.Fatalf("extend with %d waits out: %v", waits, err)
	}
	queued(waits)
	if n := c.FramedConns("http://" + addr); n < 2 {
		t.Errorf("the waits shared %d connection(s); want them spread over more", n)
	}
	if ok, err := c.Release(ectx, "mine", "me", mine.Token); err != nil || !ok {
		t.Fatalf("release with %d waits out: %v %v", waits, ok, err)
	}
}
