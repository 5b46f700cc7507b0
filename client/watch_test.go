package client_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/clock"
)

var fromStart = client.Revision{Index: 0, Seq: api.EndOfEntry}

// next receives one event, moving the test clock meanwhile so that a
// client backing off after a fault goes on. The bound only turns a hang
// into a failure.
func next(t *testing.T, clk *clock.Fake, w *client.Watch) client.Event {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		select {
		case ev, ok := <-w.Events():
			if !ok {
				t.Fatalf("the watch ended: %v", w.Err())
			}
			return ev
		case <-time.After(5 * time.Millisecond):
			clk.Advance(100 * time.Millisecond)
		}
	}
	t.Fatal("no event")
	return client.Event{}
}

func describe(ev client.Event) string {
	return fmt.Sprintf("%s %s %s %d", ev.Type, ev.Key, ev.Holder, ev.Token)
}

// A long-poll whose answer is lost (the server served it and reset the
// connection), or one that never reached the server (dropped), is sent
// again after the last event seen: nothing is missed, nothing repeated.
// Over frames a cut connection takes every request on it along, so the
// writes go through a client of their own.
func TestWatchResumesAfterLostAnswersWithoutGapsOrRepeats(t *testing.T) {
	leakCheck(t)
	for _, framed := range []bool{false, true} {
		for _, fault := range []string{"reset", "drop"} {
			t.Run(fmt.Sprintf("%s framed=%v", fault, framed), func(t *testing.T) {
				ctx := context.Background()
				clk := newFakeClock()
				// Every fault reaches the watch loop.
				srv, c := newPair(t, clk, client.WithRetries(0), client.WithFramed(framed))
				writer, err := client.New([]string{srv.Addr}, client.WithFramed(framed))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(writer.Close)
				w := c.Watch(ctx, "jobs/", client.WatchAfter(fromStart), client.WatchWait(time.Minute))
				defer w.Close()
				if _, err := writer.Grant(ctx, "jobs/a", "alice", time.Hour, 0); err != nil {
					t.Fatal(err)
				}
				if ev := next(t, clk, w); describe(ev) != "granted jobs/a alice 1" {
					t.Fatalf("first: %s", describe(ev))
				}
				srv.Fail("watch", fault)
				before := srv.Count("watch")
				if _, err := writer.Grant(ctx, "jobs/b", "bob", time.Hour, 0); err != nil {
					t.Fatal(err)
				}
				if _, err := writer.Grant(ctx, "other/x", "carol", time.Hour, 0); err != nil {
					t.Fatal(err)
				}
				// The clock moves so that the watch's back-off after a
				// fault ends. A long-poll already at the server when the
				// fault was set is served and carries jobs/b: the watch
				// hands it over before it polls again, so it is taken
				// here, and the polls after it meet the fault.
				var got []string
				waitFor(t, "faulted watches", func() bool {
					select {
					case ev, ok := <-w.Events():
						if !ok {
							t.Fatalf("the watch ended: %v", w.Err())
						}
						got = append(got, describe(ev))
					default:
					}
					clk.Advance(100 * time.Millisecond)
					return srv.Count("watch") >= before+2
				})
				srv.Fail("watch", "")
				if _, err := writer.Release(ctx, "jobs/a", "alice", 1); err != nil {
					t.Fatal(err)
				}
				for len(got) < 2 {
					got = append(got, describe(next(t, clk, w)))
				}
				if fmt.Sprint(got) != "[granted jobs/b bob 2 released jobs/a alice 1]" {
					t.Fatalf("after the %s: %v", fault, got)
				}
				if r := w.Revision(); r.Index == 0 {
					t.Fatalf("revision %s", r)
				}
			})
		}
	}
}

// A long-poll that the node never answers while the node answers its
// health checks (the request or its answer lost on a connection that
// broke silently) is given up once well past its wait and sent again: the
// watch goes on. It used to wait for that answer for ever. Found by the
// simulation (internal/sim, seed 4: a watcher on a lossy link).
func TestWatchGoesOnAfterALongPollNeverAnswered(t *testing.T) {
	leakCheck(t)
	ctx := context.Background()
	clk := newFakeClock()
	srv, c := newPair(t, clk)
	writer, err := client.New([]string{srv.Addr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(writer.Close)
	w := c.Watch(ctx, "jobs/", client.WatchAfter(fromStart), client.WatchWait(time.Second))
	defer w.Close()
	if _, err := writer.Grant(ctx, "jobs/a", "alice", time.Hour, 0); err != nil {
		t.Fatal(err)
	}
	if ev := next(t, clk, w); describe(ev) != "granted jobs/a alice 1" {
		t.Fatalf("first: %s", describe(ev))
	}
	before := srv.Count("watch")
	srv.Fail("watch", "hang")
	waitFor(t, "a hung long-poll", func() bool { return srv.Count("watch") > before })
	srv.Fail("watch", "")
	if _, err := writer.Grant(ctx, "jobs/b", "bob", time.Hour, 0); err != nil {
		t.Fatal(err)
	}
	if ev := next(t, clk, w); describe(ev) != "granted jobs/b bob 2" {
		t.Fatalf("after the hung poll: %s", describe(ev))
	}
}

func TestWatchCompactedIsATypedError(t *testing.T) {
	leakCheck(t)
	clk := newFakeClock()
	srv, c := newPair(t, clk)
	srv.Fail("watch", api.CodeCompacted)
	w := c.Watch(context.Background(), "", client.WatchAfter(client.Revision{Index: 3, Seq: 1}))
	for range w.Events() {
		t.Fatal("an event from a compacted watch")
	}
	var ce *client.CompactedError
	if err := w.Err(); !errors.Is(err, client.ErrCompacted) || !errors.As(err, &ce) || ce.After.String() != "3.1" {
		t.Fatalf("Err = %v", err)
	}
	w.Close()
}

// A list resyncs: it shows the present, and a watch after its revision
// goes on from there.
func TestWatchListThenWatchAfterIt(t *testing.T) {
	leakCheck(t)
	ctx := context.Background()
	clk := newFakeClock()
	_, c := newPair(t, clk)
	for _, k := range []string{"q/a", "q/b"} {
		if _, err := c.Grant(ctx, k, "h", time.Hour, 0); err != nil {
			t.Fatal(err)
		}
	}
	locks, rev, err := c.WatchList(ctx, "q/")
	if err != nil || len(locks) != 2 || rev.Seq != api.EndOfEntry {
		t.Fatalf("WatchList = %v %s %v", locks, rev, err)
	}
	w := c.Watch(ctx, "q/a", client.WatchKey(), client.WatchAfter(rev))
	defer w.Close()
	if _, err := c.Grant(ctx, "q/b", "h", time.Hour, 0); err != nil { // a renewal, on another key
		t.Fatal(err)
	}
	if _, err := c.Release(ctx, "q/a", "h", 1); err != nil {
		t.Fatal(err)
	}
	if ev := next(t, clk, w); describe(ev) != "released q/a h 1" || ev.Revision.Compare(rev) <= 0 {
		t.Fatalf("after the list: %s at %s", describe(ev), ev.Revision)
	}
}
