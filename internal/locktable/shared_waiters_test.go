package locktable

import (
	"fmt"
	"testing"
)

// TestSharedWaitersAreSeen: a writer queued on a read/write lock and a
// holder queued for a permit are reported like exclusive waiters: a
// wait-joined event when they join, wait-left when they cancel, and
// QueueOf (what the overview, get and list show) lists them head first
// with a writer marked. Issue 26.3: the table counted them, said nothing.
func TestSharedWaitersAreSeen(t *testing.T) {
	tb := New()
	var evs []string
	tb.SetObserver(func(ev Event) {
		evs = append(evs, fmt.Sprintf("%s %s %s at=%d since=%d", ev.Kind, ev.Key, ev.Holder, ev.At, ev.Since))
	})
	rw, w := Shared{Kind: ReadWrite}, Shared{Kind: ReadWrite, Write: true}
	sem := Shared{Kind: Semaphore, Permits: 1}
	mustShared := func(key, holder string, s Shared, now Time, deadline Time, wantGranted bool) {
		t.Helper()
		_, granted, err := tb.AcquireShared(key, holder, s, now, 10*Second, deadline, WaitLimits{})
		if err != nil || granted != wantGranted {
			t.Fatalf("%s %s: granted %v, %v; want granted %v", key, holder, granted, err, wantGranted)
		}
	}
	mustShared("rw", "reader", rw, 1, 0, true)
	mustShared("rw", "writer", w, 2, 100, false)
	mustShared("rw", "late-reader", rw, 3, 100, false) // behind the writer: FIFO
	mustShared("sem", "a", sem, 4, 0, true)
	mustShared("sem", "b", sem, 5, 100, false)
	mustShared("sem", "b", sem, 6, 200, false) // asks again: keeps its place, no second event

	q, n := tb.QueueOf("rw", 0)
	if n != 2 || len(q) != 2 || q[0].Holder != "writer" || !q[0].Write || q[1].Holder != "late-reader" || q[1].Write || q[0].Since != 2 || q[0].Deadline != 100 {
		t.Fatalf("rw queue: %+v (%d in all)", q, n)
	}
	if q, n := tb.QueueOf("rw", 1); n != 2 || len(q) != 1 || q[0].Holder != "writer" {
		t.Fatalf("rw queue head: %+v (%d in all)", q, n)
	}
	if q, n := tb.QueueOf("sem", 0); n != 1 || len(q) != 1 || q[0].Holder != "b" || q[0].Deadline != 200 {
		t.Fatalf("sem queue: %+v (%d in all)", q, n)
	}
	if !tb.CancelWaitAt("rw", "writer", 7) { // the readers behind it get in at 7
		t.Fatal("the writer was not queued")
	}
	want := []string{
		"granted rw reader at=1 since=1",
		"wait-joined rw writer at=2 since=2",
		"wait-joined rw late-reader at=3 since=3",
		"granted sem a at=4 since=4",
		"wait-joined sem b at=5 since=5",
		"wait-left rw writer at=7 since=2",
		"granted rw late-reader at=7 since=3",
	}
	if fmt.Sprint(evs) != fmt.Sprint(want) {
		t.Fatalf("events:\n got  %q\n want %q", evs, want)
	}
	if qs := tb.QueuedWaiters(); len(qs) != 1 || qs[0].Key != "sem" || qs[0].Holder != "b" {
		t.Fatalf("queued waiters: %+v", qs)
	}
}
