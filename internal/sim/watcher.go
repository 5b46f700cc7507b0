package sim

import (
	"context"
	"fmt"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/internal/eventlog"
	"github.com/fencelock/fencelock/internal/locktable"
)

// The watcher is one more client process, watching every key from the
// first revision through the world's faults: it must be told each event
// of the committed log once, in order, none missing. The events it must
// see are numbered the way every node's event log numbers them
// (eventlog.Wire), from the auditor's replay of the committed log.

// watchDrain is how long, once everyone else has stopped, the watcher may
// take to be told the last event of the log.
const watchDrain = 30 * time.Second

// expect records ev, committed at index, as the watcher must see it
// (under the cluster's lock, from the auditor).
func (h *history) expect(index uint64, ev locktable.Event) {
	rev := api.Revision{Index: index, Seq: 1}
	if n := len(h.events); n > 0 && h.events[n-1].Revision.Index == index {
		rev.Seq = h.events[n-1].Revision.Seq + 1
	}
	h.events = append(h.events, eventlog.Wire(rev, ev))
}

// watch runs a's watch until stop is closed and it has been told
// everything the committed log holds, or watchDrain after stop.
func (a *actor) watch(stop <-chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wt := a.c.Watch(ctx, "", client.WatchAfter(api.Revision{}), client.WatchBuffer(256), client.WatchWait(5*time.Second))
	var got []client.Event
	var drain <-chan time.Time
	caughtUp := func() bool {
		a.w.cl.mu.Lock()
		defer a.w.cl.mu.Unlock()
		return len(got) >= len(a.w.hist.events)
	}
	defer func() { a.w.hist.watched(got, wt.Err()) }()
	for {
		select {
		case ev, ok := <-wt.Events():
			if !ok {
				return
			}
			got = append(got, ev)
			if drain != nil && caughtUp() {
				return
			}
		case <-stop:
			stop = nil
			if caughtUp() {
				return
			}
			t := time.NewTimer(watchDrain)
			defer t.Stop()
			drain = t.C
		case <-drain:
			return
		}
	}
}

// watched checks what the watcher was told against the committed log:
// each event once, in order, the same as the log's, none missing.
func (h *history) watched(got []client.Event, err error) {
	h.w.cl.mu.Lock()
	want := h.events
	h.w.cl.mu.Unlock()
	h.w.tracef("watch: told %d events of the log's %d (%v)", len(got), len(want), err)
	for i, ev := range got {
		if i >= len(want) {
			h.w.violate("watch: told event %d (%s %s %s at %v), beyond the committed log's %d", i, ev.Type, ev.Key, ev.Holder, ev.Revision, len(want))
			return
		}
		if w := want[i]; ev.Revision != w.Revision || ev.Type != w.Type || ev.Key != w.Key || ev.Holder != w.Holder || ev.Token != w.Token || ev.Reason != w.Reason {
			h.w.violate("watch: event %d told as %s", i, describeWatch(ev.Revision, ev.Type, ev.Key, ev.Holder, ev.Token, ev.Reason)+
				", the committed log's is "+describeWatch(w.Revision, w.Type, w.Key, w.Holder, w.Token, w.Reason))
			return
		}
	}
	if len(got) < len(want) {
		w := want[len(got)]
		h.w.violate("watch: told %d events of the committed log's %d, the first missing %s (the watch's error: %v)", len(got), len(want),
			describeWatch(w.Revision, w.Type, w.Key, w.Holder, w.Token, w.Reason), err)
	}
}

func describeWatch(rev api.Revision, typ, key, holder string, token uint64, reason string) string {
	s := fmt.Sprintf("%d.%d %s %s %s token %d", rev.Index, rev.Seq, typ, key, holder, token)
	if reason != "" {
		s += " (" + reason + ")"
	}
	return s
}
