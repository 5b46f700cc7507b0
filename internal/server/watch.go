package server

import (
	"fmt"
	"sort"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/locktable"
)

// The history of watches (service_watch.go). Every table event reaches
// the server's observer, inside Apply on every node, with the index of
// the entry that caused it; the hub numbers it (index, position in the
// entry), keeps the last Config.WatchHistory of them in a ring, and wakes
// the watchers by closing a channel: one close per event wakes them all,
// the state machine never waits for a watcher, and a watcher is never
// polled. A watcher keeps only its cursor; one that falls behind the ring
// is told so (CodeCompacted) instead of being buffered for.

// watchEvent is one numbered table event.
type watchEvent struct {
	rev api.Revision
	ev  locktable.Event
}

type watchHub struct {
	mu   sync.RWMutex
	ring []watchEvent // circular, len is the capacity
	head int          // index in ring of the oldest event
	n    int          // events kept
	// floor: every event after it is in the ring (or not yet applied).
	// It is the last event evicted, or where the node's history began
	// (its start, the snapshot it restored).
	floor api.Revision
	last  api.Revision // the last event appended, or floor
	wake  chan struct{}

	// Watchers open: in all, and by caller (principal, else remote host).
	count       sync.Mutex
	total       int
	byCaller    map[string]int
	maxTotal    int
	maxByCaller int
	gauge       func(n int)
}

func newWatchHub(history, maxTotal, maxByCaller int, gauge func(int)) *watchHub {
	return &watchHub{ring: make([]watchEvent, history), wake: make(chan struct{}),
		byCaller: map[string]int{}, maxTotal: maxTotal, maxByCaller: maxByCaller, gauge: gauge}
}

// append numbers ev and keeps it. It runs inside Apply: it takes only the
// hub's lock, which readers hold for a scan of the ring at most.
func (h *watchHub) append(index uint64, ev locktable.Event) {
	h.mu.Lock()
	rev := api.Revision{Index: index, Seq: 1}
	if h.last.Index == index && h.last.Seq != api.EndOfEntry {
		rev.Seq = h.last.Seq + 1
	}
	if h.n == len(h.ring) {
		h.floor = h.ring[h.head].rev
		h.ring[h.head] = watchEvent{}
		h.head = (h.head + 1) % len(h.ring)
		h.n--
	}
	h.ring[(h.head+h.n)%len(h.ring)] = watchEvent{rev: rev, ev: ev}
	h.n++
	h.last = rev
	close(h.wake)
	h.wake = make(chan struct{})
	h.mu.Unlock()
}

// restored forgets the history: the state machine was replaced by a
// snapshot of the state after entry index, so what happened before it is
// not known here. Watchers are woken to learn it.
func (h *watchHub) restored(index uint64) {
	h.mu.Lock()
	clear(h.ring)
	h.head, h.n = 0, 0
	h.floor = api.Revision{Index: index, Seq: api.EndOfEntry}
	h.last = h.floor
	close(h.wake)
	h.wake = make(chan struct{})
	h.mu.Unlock()
}

// now is the revision of the present: the last event applied, or where
// the history begins.
func (h *watchHub) now() api.Revision {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.last
}

func (h *watchHub) at(i int) *watchEvent { return &h.ring[(h.head+i)%len(h.ring)] }

// read returns up to limit events after after that match, the revision to
// read after next time, and a channel closed at the next append. It
// refuses a revision before the history (compacted).
func (h *watchHub) read(after api.Revision, match func(key string) bool, limit int) ([]watchEvent, api.Revision, <-chan struct{}, *Error) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if after.Compare(h.floor) < 0 {
		return nil, after, nil, compacted(h.floor, "revision %s is older than the history this node keeps, which starts after %s: resync (list=true) and watch after the list's revision", after, h.floor)
	}
	i := sort.Search(h.n, func(i int) bool { return h.at(i).rev.Compare(after) > 0 })
	var out []watchEvent
	next := after
	for ; i < h.n; i++ {
		e := h.at(i)
		next = e.rev
		if match(e.ev.Key) {
			out = append(out, *e)
			if len(out) == limit {
				return out, next, h.wake, nil
			}
		}
	}
	if h.last.Compare(next) > 0 {
		next = h.last // the history begins later than after: nothing between
	}
	return out, next, h.wake, nil
}

func compacted(oldest api.Revision, format string, args ...any) *Error {
	e := newError(api.CodeCompacted, format, args...)
	e.CompactRevision = &oldest
	return e
}

// join counts one more watcher of caller, or refuses past a limit.
func (h *watchHub) join(caller string) *Error {
	h.count.Lock()
	defer h.count.Unlock()
	if h.maxTotal > 0 && h.total >= h.maxTotal {
		return newError(api.CodeTooManyWatchers, "this node has %d watches open, its limit (WatchMaxWatchers)", h.total)
	}
	if h.maxByCaller > 0 && h.byCaller[caller] >= h.maxByCaller {
		return newError(api.CodeTooManyWatchers, "%s has %d watches open on this node, the limit per caller (WatchMaxPerCaller)", caller, h.byCaller[caller])
	}
	h.total++
	h.byCaller[caller]++
	h.gauge(h.total)
	return nil
}

func (h *watchHub) leave(caller string) {
	h.count.Lock()
	defer h.count.Unlock()
	h.total--
	if h.byCaller[caller]--; h.byCaller[caller] <= 0 {
		delete(h.byCaller, caller)
	}
	h.gauge(h.total)
}

// watchDefaults are c's watch limits with zero meaning the default and
// -1 no cap (0 inside the hub).
func watchDefaults(c, d Config) (history, total, perCaller int) {
	pick := func(v, def int) int {
		switch {
		case v == 0:
			return def
		case v < 0:
			return 0
		}
		return v
	}
	history = c.WatchHistory
	if history == 0 {
		history = d.WatchHistory
	}
	return history, pick(c.WatchMaxWatchers, d.WatchMaxWatchers), pick(c.WatchMaxPerCaller, d.WatchMaxPerCaller)
}

// maxWatchHistory bounds Config.WatchHistory: a million events is about
// 100 MB besides their keys.
const maxWatchHistory = 1 << 20

func checkWatchConfig(c Config) []error {
	var errs []error
	if c.WatchHistory < 0 || c.WatchHistory > maxWatchHistory {
		errs = append(errs, fmt.Errorf("server: config: WatchHistory is %d; it must be between 1 and %d (0 is the default)", c.WatchHistory, maxWatchHistory))
	}
	for _, w := range []struct {
		name string
		v    int
	}{{"WatchMaxWatchers", c.WatchMaxWatchers}, {"WatchMaxPerCaller", c.WatchMaxPerCaller}} {
		if w.v < -1 {
			errs = append(errs, fmt.Errorf("server: config: %s is %d; it must be positive (0 is the default, -1 no cap)", w.name, w.v))
		}
	}
	return errs
}

// watchGauge registers fencelock_watchers and answers its setter.
func (s *Server) watchGauge() func(int) {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "fencelock_watchers", Help: "Watches open on this node (long-polls waiting and event streams)."})
	s.metrics.reg.MustRegister(g)
	return func(n int) { g.Set(float64(n)) }
}
