package sim

import (
	"context"
	"errors"
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
// (under amu, from the auditor).
func (h *history) expect(index uint64, ev locktable.Event) {
	rev := api.Revision{Index: index, Seq: 1}
	if n := len(h.events); n > 0 && h.events[n-1].Revision.Index == index {
		rev.Seq = h.events[n-1].Revision.Seq + 1
	}
	h.events = append(h.events, eventlog.Wire(rev, ev))
}

// watchSeg is one watch of the watcher's: the revision it started
// after, what it was told, and how it ended (a compaction starts the
// next one after the oldest revision the server kept, as client.Watch's
// doc says a watcher resyncs).
type watchSeg struct {
	after api.Revision
	got   []client.Event
	err   error
}

// watch runs a's watch until stop is closed and it has been told
// everything the committed log holds, or watchDrain after stop.
func (a *actor) watch(stop <-chan struct{}) {
	var segs []watchSeg
	defer func() { a.w.hist.watched(a.src(), segs) }()
	var drain <-chan time.Time
	var drainT *time.Timer
	defer func() {
		if drainT != nil {
			drainT.Stop()
		}
	}()
	stopped, drained := false, false
	for after := (api.Revision{}); ; {
		ctx, cancel := context.WithCancel(context.Background())
		wt := a.c.Watch(ctx, "", client.WatchAfter(after), client.WatchBuffer(256), client.WatchWait(5*time.Second))
		seg := watchSeg{after: after}
		last := func() api.Revision {
			if n := len(seg.got); n > 0 {
				return seg.got[n-1].Revision
			}
			return seg.after
		}
		closed := false
		// take appends every event already waiting: whichever case a
		// select below ran, the state it goes on from is the same.
		take := func() {
			for {
				select {
				case ev, ok := <-wt.Events():
					if !ok {
						closed = true
						return
					}
					seg.got = append(seg.got, ev)
				default:
					return
				}
			}
		}
		for {
			take()
			if closed || drained || stopped && a.w.hist.caughtUp(last()) {
				break
			}
			select {
			case ev, ok := <-wt.Events():
				if !ok {
					closed = true
				} else {
					seg.got = append(seg.got, ev)
				}
			case <-stop:
				stop, stopped = nil, true
				drainT = time.NewTimer(watchDrain)
				drain = drainT.C
			case <-drain:
				drained = true
			}
		}
		cancel()
		seg.err = wt.Err()
		segs = append(segs, seg)
		var ce *client.CompactedError
		if !closed || !errors.As(seg.err, &ce) {
			return
		}
		a.w.tracef(a.src(), "watch: compacted after %v; the oldest revision kept is %v", ce.After, ce.Oldest)
		after = ce.Oldest
	}
}

// caughtUp says whether rev is the committed log's last event.
func (h *history) caughtUp(rev api.Revision) bool {
	h.amu.Lock()
	defer h.amu.Unlock()
	n := len(h.events)
	return n == 0 || !revBefore(rev, h.events[n-1].Revision)
}

// revBefore says whether a comes before b.
func revBefore(a, b api.Revision) bool {
	return a.Index < b.Index || a.Index == b.Index && a.Seq < b.Seq
}

// watched checks what the watcher was told against the committed log:
// each watch told the log's events after the revision it started
// after, once, in order, the same as the log's; only a compaction ended
// one before the log's end, and the last told every event to the end.
func (h *history) watched(src string, segs []watchSeg) {
	h.amu.Lock()
	want := h.events
	h.amu.Unlock()
	told := 0
	for si, seg := range segs {
		i := 0
		for i < len(want) && !revBefore(seg.after, want[i].Revision) {
			i++
		}
		for k, ev := range seg.got {
			if i+k >= len(want) {
				h.w.violate(src, "watch: told event %d (%s %s %s at %v), beyond the committed log's %d", i+k, ev.Type, ev.Key, ev.Holder, ev.Revision, len(want))
				return
			}
			if w := want[i+k]; ev.Revision != w.Revision || ev.Type != w.Type || ev.Key != w.Key || ev.Holder != w.Holder || ev.Token != w.Token || ev.Reason != w.Reason {
				h.w.violate(src, "watch: event %d told as %s", i+k, describeWatch(ev.Revision, ev.Type, ev.Key, ev.Holder, ev.Token, ev.Reason)+
					", the committed log's is "+describeWatch(w.Revision, w.Type, w.Key, w.Holder, w.Token, w.Reason))
				return
			}
		}
		told += len(seg.got)
		end := i + len(seg.got)
		if si < len(segs)-1 || end >= len(want) {
			continue
		}
		w := want[end]
		h.w.violate(src, "watch: told %d events of the committed log's %d, the first missing %s (the watch's error: %v)", end, len(want),
			describeWatch(w.Revision, w.Type, w.Key, w.Holder, w.Token, w.Reason), seg.err)
	}
	h.w.tracef(src, "watch: told %d events of the log's %d in %d watches", told, len(want), len(segs))
}

func describeWatch(rev api.Revision, typ, key, holder string, token uint64, reason string) string {
	s := fmt.Sprintf("%d.%d %s %s %s token %d", rev.Index, rev.Seq, typ, key, holder, token)
	if reason != "" {
		s += " (" + reason + ")"
	}
	return s
}
