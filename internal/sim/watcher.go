package sim

import (
	"context"
	"errors"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/internal/sim/simcheck"
)

// The watcher is one more client process, watching every key from the
// first revision through the world's faults: it must be told each event
// of the committed log once, in order, none missing. The events it must
// see are numbered the way every node's event log numbers them
// (eventlog.Wire), from the auditor's replay of the committed log
// (simcheck.History.Watched judges what it was told).

// watchDrain is how long, once everyone else has stopped, the watcher may
// take to be told the last event of the log.
const watchDrain = 30 * time.Second

// watch runs a's watch until stop is closed and it has been told
// everything the committed log holds, or watchDrain after stop.
func (a *actor) watch(stop <-chan struct{}) {
	var segs []simcheck.WatchSeg
	defer func() { a.w.hist.Watched(a.src(), segs) }()
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
		var wt interface {
			Events() <-chan client.Event
			Err() error
		}
		if a.w.cfg.Stream {
			wt = a.watchStream(ctx, after)
		} else {
			wt = a.c.Watch(ctx, "", client.WatchAfter(after), client.WatchBuffer(256), client.WatchWait(5*time.Second))
		}
		seg := simcheck.WatchSeg{After: after}
		last := func() api.Revision {
			if n := len(seg.Got); n > 0 {
				return seg.Got[n-1].Revision
			}
			return seg.After
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
					seg.Got = append(seg.Got, ev)
				default:
					return
				}
			}
		}
		for {
			take()
			if closed || drained || stopped && a.w.hist.CaughtUp(last()) {
				break
			}
			select {
			case ev, ok := <-wt.Events():
				if !ok {
					closed = true
				} else {
					seg.Got = append(seg.Got, ev)
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
		seg.Err = wt.Err()
		segs = append(segs, seg)
		var ce *client.CompactedError
		if !closed || !errors.As(seg.Err, &ce) {
			return
		}
		a.w.tracef(a.src(), "watch: compacted after %v; the oldest revision kept is %v", ce.After, ce.Oldest)
		after = ce.Oldest
	}
}
