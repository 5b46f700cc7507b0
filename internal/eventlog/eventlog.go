// Package eventlog keeps the recent history of the lock table's events for
// watchers to read. Every table event reaches the service's observer,
// inside Apply on every node, with the index of the entry that caused it;
// the log numbers it (index, position in the entry: the revision every
// node gives it alike) and keeps the latest of them, and a goroutine of
// its own (Broadcast) wakes the watchers by closing a channel: one close
// wakes them all, and a watcher is never polled. A watcher keeps only its
// cursor; one that falls behind the history is told so (*CompactedError)
// instead of being buffered for.
//
// The state machine never waits for a watcher: events are kept in
// segments that readers share without a lock. Append writes slot n of the
// newest segment, then marks n+1 filled; Publish, once the state machine
// has applied the whole batch of entries, makes what was appended visible
// and wakes the watchers once. A reader reads only published slots,
// which are never written again, and the list of segments is an
// immutable value swapped whole when a segment is added or the oldest
// dropped. (With a lock, 1,000 watchers scanning held the apply up: the
// leader granted under 600 locks a second instead of 50,000.)
package eventlog

import (
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/locktable"
)

// maxSegment is the most events of one segment. A history of n events
// has segments of min(maxSegment, n/16) events (at least 1) and drops
// them whole: it keeps from n less one segment to n plus one segment.
const maxSegment = 256

type watchSegment struct {
	ev []api.WatchEvent // in wire form: made once, not once per watcher
	n  atomic.Int32     // slots published
}

// history is the kept events as one immutable value: segs oldest first,
// all full but the last; floor is the revision just before the first.
type history struct {
	segs  []*watchSegment
	floor api.Revision // every event after it is here (or not yet applied)
}

// Log is the history of events and the count of its watchers.
type Log struct {
	hist atomic.Pointer[history]
	wake atomic.Pointer[chan struct{}] // closed by broadcast
	kick chan struct{}                 // 1-buffered: an append since the last broadcast
	// Written by append, publish and restored only (the FSM's apply
	// goroutine).
	last    api.Revision  // the last event appended, or the floor
	lastAt  *api.Revision // its slot's revision; nil once published
	lastPub atomic.Pointer[api.Revision]
	keep    int // segments kept
	segLen  int // events per segment

	// Watchers open: in all, and by caller (principal, else remote host).
	count       sync.Mutex
	total       int
	byCaller    map[string]int
	maxTotal    int
	maxByCaller int
	gauge       func(n int)
}

// New keeps the latest size events (> 0) for at most maxTotal watchers in
// all and maxByCaller of one caller (0: no cap); gauge is told the count.
func New(size, maxTotal, maxByCaller int, gauge func(int)) *Log {
	segLen := min(maxSegment, max(1, size/16))
	h := &Log{kick: make(chan struct{}, 1), keep: (size + segLen - 1) / segLen, segLen: segLen,
		byCaller: map[string]int{}, maxTotal: maxTotal, maxByCaller: maxByCaller, gauge: gauge}
	h.hist.Store(&history{})
	w := make(chan struct{})
	h.wake.Store(&w)
	h.lastPub.Store(&api.Revision{})
	return h
}

// Append numbers ev and keeps it, unseen by readers until Publish. It
// runs inside Apply, on one goroutine at a time, and takes no lock.
func (h *Log) Append(index uint64, ev locktable.Event) {
	rev := api.Revision{Index: index, Seq: 1}
	if h.last.Index == index && h.last.Seq != api.EndOfEntry {
		rev.Seq = h.last.Seq + 1
	}
	hs := h.hist.Load()
	var seg *watchSegment
	if k := len(hs.segs); k > 0 && int(hs.segs[k-1].n.Load()) < h.segLen {
		seg = hs.segs[k-1]
	} else {
		seg = &watchSegment{ev: make([]api.WatchEvent, h.segLen)}
		next := &history{segs: append(append(make([]*watchSegment, 0, len(hs.segs)+1), hs.segs...), seg), floor: hs.floor}
		if len(next.segs) > h.keep {
			dropped := next.segs[0]
			next.floor = dropped.ev[h.segLen-1].Revision
			next.segs = next.segs[1:]
		}
		h.hist.Store(next)
	}
	n := seg.n.Load()
	seg.ev[n] = Wire(rev, ev)
	seg.n.Store(n + 1)
	h.last = rev
	// The event's own revision, which nothing writes again (a segment's
	// slot is filled once): publishing it allocates nothing.
	h.lastAt = &seg.ev[n].Revision
}

// Publish makes the events appended since the last Publish visible to
// readers and wakes the watchers: once per batch of entries the state
// machine applied (fsm.OnApplied), after the batch's last event. So a
// reader never sees part of an entry's or a batch's events, and the
// watchers are woken once per batch, not once per event. Same goroutine
// as Append.
func (h *Log) Publish() {
	if h.lastAt == nil {
		return
	}
	h.lastPub.Store(h.lastAt)
	h.lastAt = nil
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

// Restored forgets the history: the state machine was replaced by a
// snapshot of the state after entry index, so what happened before it is
// not known here. Watchers are woken to learn it.
func (h *Log) Restored(index uint64) {
	floor := api.Revision{Index: index, Seq: api.EndOfEntry}
	h.hist.Store(&history{floor: floor})
	h.last, h.lastAt = floor, nil
	h.lastPub.Store(&floor)
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

// watchCoalesce is the least time between two wake-ups of the watchers:
// events that come meanwhile are delivered together, at most this late.
// Waking a thousand watchers costs a millisecond or two of CPU; woken for
// every event, they would take the CPU the writes need.
const watchCoalesce = 2 * time.Millisecond

// Broadcast wakes the watchers after each append, at most once per
// watchCoalesce (real time: it paces CPU, not lease time), until stop.
func (h *Log) Broadcast(stop <-chan struct{}) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-h.kick:
		case <-stop:
			return
		}
		w := make(chan struct{})
		close(*h.wake.Swap(&w))
		t.Reset(watchCoalesce)
		select {
		case <-t.C:
		case <-stop:
			return
		}
	}
}

// Now is the revision of the present: the last event applied, or where
// the history begins.
func (h *Log) Now() api.Revision { return *h.lastPub.Load() }

// Read returns up to limit events after after that match, the revision to
// read after next time, and a channel closed once more may have come. It
// refuses a revision before the history (compacted).
//
// The events returned are shared with every reader: never change them.
func (h *Log) Read(after api.Revision, match func(key string) bool, limit int) ([]*api.WatchEvent, api.Revision, <-chan struct{}, error) {
	// The channel first: an event published after the read below closes
	// it (or a later one that this one precedes).
	wake := *h.wake.Load()
	last := h.Now()
	hs := h.hist.Load()
	if after.Compare(hs.floor) < 0 {
		return nil, after, nil, &CompactedError{After: after, Floor: hs.floor}
	}
	// The first segment whose last published event is after after.
	si := sort.Search(len(hs.segs), func(i int) bool {
		seg := hs.segs[i]
		n := seg.n.Load()
		return n > 0 && seg.ev[n-1].Revision.Compare(after) > 0
	})
	var out []*api.WatchEvent
	next := after
	for ; si < len(hs.segs); si++ {
		seg := hs.segs[si]
		n := int(seg.n.Load())
		i := sort.Search(n, func(i int) bool { return seg.ev[i].Revision.Compare(after) > 0 })
		for ; i < n; i++ {
			e := &seg.ev[i]
			if e.Revision.Compare(last) > 0 {
				return out, next, wake, nil // appended, not yet published
			}
			next = e.Revision
			if match(e.Key) {
				if out == nil {
					out = make([]*api.WatchEvent, 0, min(limit, n-i+(len(hs.segs)-si-1)*h.segLen))
				}
				out = append(out, e)
				if len(out) == limit {
					return out, next, wake, nil
				}
			}
		}
	}
	if last.Compare(next) > 0 && len(hs.segs) == 0 {
		next = last // the history begins later than after: nothing between
	}
	return out, next, wake, nil
}

// CompactedError refuses a read after a revision older than the history.
type CompactedError struct {
	After api.Revision // the revision asked for
	Floor api.Revision // the history starts after it
}

func (e *CompactedError) Error() string {
	return fmt.Sprintf("revision %s is older than the history this node keeps, which starts after %s: resync (list=true) and watch after the list's revision", e.After, e.Floor)
}

// LimitError refuses a watcher past a cap: the node's (Caller "") or its
// caller's.
type LimitError struct {
	Caller string
	Open   int // watchers open now, in all or of the caller
}

func (e *LimitError) Error() string {
	if e.Caller == "" {
		return fmt.Sprintf("this node has %d watches open, its limit (server --max-watchers)", e.Open)
	}
	return fmt.Sprintf("%s has %d watches open on this node, the limit per caller (server --max-watchers-per-caller)", e.Caller, e.Open)
}

// Join counts one more watcher of caller, or refuses past a limit.
func (h *Log) Join(caller string) error {
	h.count.Lock()
	defer h.count.Unlock()
	if h.maxTotal > 0 && h.total >= h.maxTotal {
		return &LimitError{Open: h.total}
	}
	if h.maxByCaller > 0 && h.byCaller[caller] >= h.maxByCaller {
		return &LimitError{Caller: caller, Open: h.byCaller[caller]}
	}
	h.total++
	h.byCaller[caller]++
	h.gauge(h.total)
	return nil
}

func (h *Log) Leave(caller string) {
	h.count.Lock()
	defer h.count.Unlock()
	h.total--
	if h.byCaller[caller]--; h.byCaller[caller] <= 0 {
		delete(h.byCaller, caller)
	}
	h.gauge(h.total)
}

// Wire is ev, the event at rev, as the API carries it.
func Wire(rev api.Revision, ev locktable.Event) api.WatchEvent {
	w := api.WatchEvent{Revision: rev, Key: ev.Key, Holder: ev.Holder, Token: ev.Token,
		AtMs: clusterMs(ev.At), SinceMs: clusterMs(ev.Since)}
	switch ev.Kind {
	case locktable.EventGranted:
		w.Type, w.TTLMs = api.WatchGranted, int64(time.Duration(ev.Expiry-ev.At)/time.Millisecond)
	case locktable.EventReleased:
		w.Type = api.WatchReleased
	case locktable.EventExpired:
		w.Type = api.WatchExpired
	case locktable.EventWaitJoined:
		w.Type = api.WatchWaitJoined
	case locktable.EventWaitLeft:
		w.Type, w.Reason = api.WatchWaitLeft, api.WaitLeftCancelled
	case locktable.EventWaitDropped:
		w.Type, w.Reason = api.WatchWaitLeft, api.WaitLeftDeadline
	default:
		w.Type = ev.Kind.String()
	}
	return w
}

// clusterMs is a cluster time in milliseconds.
func clusterMs(t locktable.Time) int64 { return int64(t) / int64(time.Millisecond) }
