package simcheck

import (
	"fmt"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/internal/eventlog"
	"github.com/fencelock/fencelock/internal/locktable"
)

// The watcher (internal/sim) watches every key from the first revision
// through the world's faults: it must be told each event of the committed
// log once, in order, none missing. The events it must see are numbered
// the way every node's event log numbers them (eventlog.Wire), from the
// auditor's replay of the committed log.

// expect records ev, committed at index, as the watcher must see it
// (under amu, from the auditor).
func (h *History) expect(index uint64, ev locktable.Event) {
	rev := api.Revision{Index: index, Seq: 1}
	if n := len(h.events); n > 0 && h.events[n-1].Revision.Index == index {
		rev.Seq = h.events[n-1].Revision.Seq + 1
	}
	h.events = append(h.events, eventlog.Wire(rev, ev))
}

// WatchSeg is one watch of the watcher's: the revision it started
// after, what it was told, and how it ended (a compaction starts the
// next one after the oldest revision the server kept, as client.Watch's
// doc says a watcher resyncs).
type WatchSeg struct {
	After api.Revision
	Got   []client.Event
	Err   error
}

// CaughtUp says whether rev is the committed log's last event.
func (h *History) CaughtUp(rev api.Revision) bool {
	h.amu.Lock()
	defer h.amu.Unlock()
	n := len(h.events)
	return n == 0 || !revBefore(rev, h.events[n-1].Revision)
}

// revBefore says whether a comes before b.
func revBefore(a, b api.Revision) bool {
	return a.Index < b.Index || a.Index == b.Index && a.Seq < b.Seq
}

// Watched checks what the watcher was told against the committed log:
// each watch told the log's events after the revision it started
// after, once, in order, the same as the log's; only a compaction ended
// one before the log's end, and the last told every event to the end.
func (h *History) Watched(src string, segs []WatchSeg) {
	h.amu.Lock()
	want := h.events
	h.amu.Unlock()
	told := 0
	for si, seg := range segs {
		i := 0
		for i < len(want) && !revBefore(seg.After, want[i].Revision) {
			i++
		}
		for k, ev := range seg.Got {
			if i+k >= len(want) {
				h.r.Violate(src, "watch: told event %d (%s %s %s at %v), beyond the committed log's %d", i+k, ev.Type, ev.Key, ev.Holder, ev.Revision, len(want))
				return
			}
			if w := want[i+k]; ev.Revision != w.Revision || ev.Type != w.Type || ev.Key != w.Key || ev.Holder != w.Holder || ev.Token != w.Token || ev.Reason != w.Reason {
				h.r.Violate(src, "watch: event %d told as %s", i+k, describeWatch(ev.Revision, ev.Type, ev.Key, ev.Holder, ev.Token, ev.Reason)+
					", the committed log's is "+describeWatch(w.Revision, w.Type, w.Key, w.Holder, w.Token, w.Reason))
				return
			}
		}
		told += len(seg.Got)
		end := i + len(seg.Got)
		if si < len(segs)-1 || end >= len(want) {
			continue
		}
		w := want[end]
		h.r.Violate(src, "watch: told %d events of the committed log's %d, the first missing %s (the watch's error: %v)", end, len(want),
			describeWatch(w.Revision, w.Type, w.Key, w.Holder, w.Token, w.Reason), seg.Err)
	}
	h.r.Tracef(src, "watch: told %d events of the log's %d in %d watches", told, len(want), len(segs))
}

func describeWatch(rev api.Revision, typ, key, holder string, token uint64, reason string) string {
	s := fmt.Sprintf("%d.%d %s %s %s token %d", rev.Index, rev.Seq, typ, key, holder, token)
	if reason != "" {
		s += " (" + reason + ")"
	}
	return s
}
