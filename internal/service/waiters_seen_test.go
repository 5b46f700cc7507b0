package service

import (
	"context"
	"fmt"
	"testing"

	"github.com/fencelock/fencelock/api"
)

// TestEveryWaiterIsSeen (issue 26.3): a writer waiting on a read/write
// lock and a holder waiting for a permit are seen as an exclusive waiter
// is: a wait-joined event on a watch, an entry in the overview (once per
// key, however many hold it, so the entries add up to queued), and the
// count and head of the queue in Get and List. Get and List also name the
// session a lease is held under.
func TestEveryWaiterIsSeen(t *testing.T) {
	s, _, _ := newTestService(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := s.Revision()
	rw := func(h, mode string, waitMs int64) api.AcquireRequest {
		return api.AcquireRequest{Key: "rw", Holder: h, TTLMs: 60000, Mode: mode, WaitMs: waitMs}
	}
	sem := func(h string, waitMs int64) api.AcquireRequest {
		return api.AcquireRequest{Key: "sem", Holder: h, TTLMs: 60000, Permits: 1, WaitMs: waitMs}
	}
	mustAcquire(t, s, rw("r1", api.ModeRead, 0))
	mustAcquire(t, s, rw("r2", api.ModeRead, 0))
	mustAcquire(t, s, sem("p1", 0))
	ss, err := s.OpenSession(ctx, "", api.SessionOpenRequest{Holder: "x", TTLMs: 60000})
	if err != nil {
		t.Fatal(err)
	}
	mustAcquire(t, s, api.AcquireRequest{Key: "x", Holder: "x", Session: ss.ID})
	w := queueWaiter(t, ctx, s, rw("w", api.ModeWrite, 60000), 1)
	p2 := queueWaiter(t, ctx, s, sem("p2", 60000), 1)
	q := queueWaiter(t, ctx, s, api.AcquireRequest{Key: "x", Holder: "q", TTLMs: 60000, WaitMs: 60000}, 1)
	_, _, _ = w, p2, q // answered when ctx ends

	r, err := s.Watch(ctx, api.WatchRequest{After: &start}, WatchScope{})
	if err != nil {
		t.Fatal(err)
	}
	var joined []string
	for _, e := range r.Events {
		if e.Type == api.WatchWaitJoined {
			joined = append(joined, e.Key+" "+e.Holder)
		}
	}
	if got, want := fmt.Sprint(joined), "[rw w sem p2 x q]"; got != want {
		t.Fatalf("wait-joined events %s, want %s", got, want)
	}

	o, err := s.Overview(ctx, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	var chips []string
	for _, l := range o.Locks {
		for _, wt := range l.Waiters {
			chips = append(chips, fmt.Sprintf("%s:%s%s", l.Key, wt.Holder, modeTag(wt.Mode)))
		}
	}
	if got, want := fmt.Sprint(chips), "[rw:w(write) sem:p2 x:q]"; got != want || o.Queued != 3 {
		t.Fatalf("overview waiters %s (queued %d), want %s (queued 3)", got, o.Queued, want)
	}

	for key, want := range map[string]string{"rw": "w(write)", "sem": "p2", "x": "q"} {
		l, err := s.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if l.Waiting != 1 || l.NextWaiter == nil || l.NextWaiter.Holder+modeTag(l.NextWaiter.Mode) != want || l.NextWaiter.LeftMs != 60000 {
			t.Fatalf("get %s: waiting %d, next %+v; want 1, %s", key, l.Waiting, l.NextWaiter, want)
		}
	}
	if l, _ := s.Get(ctx, "x"); l.Session != ss.ID {
		t.Fatalf("get x: session %d, want %d", l.Session, ss.ID)
	}

	ls, err := s.List(ctx, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	var rows []string
	for _, l := range ls.Locks {
		row := fmt.Sprintf("%s/%s session=%d waiting=%d", l.Key, l.Holder, l.Session, l.Waiting)
		if l.NextWaiter != nil {
			row += " next=" + l.NextWaiter.Holder
		}
		rows = append(rows, row)
	}
	want := fmt.Sprintf("[rw/r1 session=0 waiting=1 next=w rw/r2 session=0 waiting=0 sem/p1 session=0 waiting=1 next=p2 x/x session=%d waiting=1 next=q]", ss.ID)
	if got := fmt.Sprint(rows); got != want {
		t.Fatalf("list:\n got  %s\n want %s", got, want)
	}
}

func modeTag(mode string) string {
	if mode == "" {
		return ""
	}
	return "(" + mode + ")"
}
