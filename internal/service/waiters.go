package service

import (
	"cmp"
	"slices"
	"sync"

	"github.com/fencelock/fencelock/internal/locktable"
)

// waitKey names one queue position: the table keeps at most one per
// (key, holder), so two requests of one holder share it.
type waitKey struct{ key, holder string }

// waitEvent is a grant or dropped wait for a waitKey, with the log index of
// the entry that produced it.
type waitEvent struct {
	index uint64
	ev    locktable.Event
}

// sub is one waiting request's mailbox. Events are appended under the
// registry lock and signalled on a 1-buffered channel once the batch of
// entries that made them is applied (flush), so the state machine never
// blocks on a slow handler, no event is lost, and a request never wakes
// to part of a batch's events.
type sub struct {
	wk      waitKey
	seq     uint64 // joined after every sub of a lower seq
	queued  bool   // in the registry's pending: to be signalled
	signal  chan struct{}
	events  []waitEvent
	leaving bool
	failed  bool // leadership was lost: no one will tell this waiter anything
	again   bool // its queue place was cancelled by another request: queue again
}

// waitRegistry maps queue positions to the requests waiting on them.
type waitRegistry struct {
	mu   sync.Mutex
	subs map[waitKey]map[*sub]struct{}
	n    int
	gone func(n int) // reports the count, for the gauge
	// While a new leader keeps orphaned waiters (see orphanGrace), the
	// grants the queue hands to a waiter no request here serves.
	watching bool
	unserved []locktable.Event
	// Try-once acquires being proposed: their grants answer their own
	// requests, so none is a waiter's that went away.
	direct map[waitKey]int
	// subs given events since the last flush, and the last sub's seq
	pending []*sub
	seq     uint64
}

func newWaitRegistry(gauge func(n int)) *waitRegistry {
	return &waitRegistry{subs: map[waitKey]map[*sub]struct{}{}, gone: gauge, direct: map[waitKey]int{}}
}

// answering marks a try-once acquire of key by holder from before it is
// proposed until done is called: a grant to holder on key meanwhile is
// its own, answered by its request, never recorded as unserved. (A
// semaphore or read/write try-once is remembered like a wait, and without
// the mark a new leader released such a grant made in its first
// orphanGrace behind its holder.)
func (r *waitRegistry) answering(key, holder string) (done func()) {
	wk := waitKey{key, holder}
	r.mu.Lock()
	r.direct[wk]++
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.direct[wk]--; r.direct[wk] == 0 {
			delete(r.direct, wk)
		}
	}
}

// join registers a request before its Wait command is proposed, so that no
// event it needs can be applied before it listens.
func (r *waitRegistry) join(key, holder string) *sub {
	s := &sub{wk: waitKey{key, holder}, signal: make(chan struct{}, 1)}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seq++
	s.seq = r.seq
	set := r.subs[s.wk]
	if set == nil {
		set = map[*sub]struct{}{}
		r.subs[s.wk] = set
	}
	set[s] = struct{}{}
	r.n++
	r.gone(r.n)
	return s
}

// leave marks s as giving up and reports whether it was the last request
// still interested in the queue position; only then must the caller
// propose CancelWait. s stays registered (and keeps receiving events)
// until remove, so a grant committed before the cancel is not missed.
func (r *waitRegistry) leave(s *sub) (last bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s.leaving = true
	for o := range r.subs[s.wk] {
		if !o.leaving {
			return false
		}
	}
	return true
}

func (r *waitRegistry) remove(s *sub) {
	r.mu.Lock()
	defer r.mu.Unlock()
	set := r.subs[s.wk]
	if _, ok := set[s]; !ok {
		return
	}
	delete(set, s)
	if len(set) == 0 {
		delete(r.subs, s.wk)
	}
	r.n--
	r.gone(r.n)
}

// deliver is called from the state machine's observer for grants and
// dropped waits.
func (r *waitRegistry) deliver(index uint64, ev locktable.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	wk := waitKey{ev.Key, ev.Holder}
	if r.watching && ev.Kind == locktable.EventGranted && len(r.subs[wk]) == 0 && r.direct[wk] == 0 {
		r.unserved = append(r.unserved, ev)
	}
	for s := range r.subs[wk] {
		s.events = append(s.events, waitEvent{index, ev})
		if !s.queued {
			s.queued = true
			r.pending = append(r.pending, s)
		}
	}
}

// flush signals the requests given events since the last flush, in the
// order they joined: called once the state machine has applied a batch
// (fsm.OnApplied).
func (r *waitRegistry) flush() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.pending) == 0 {
		return
	}
	slices.SortFunc(r.pending, func(a, b *sub) int { return cmp.Compare(a.seq, b.seq) })
	for i, s := range r.pending {
		s.queued = false
		notify(s.signal)
		r.pending[i] = nil
	}
	r.pending = r.pending[:0]
}

// requeue tells the requests still waiting on wk that their queue place
// was cancelled under them.
func (r *waitRegistry) requeue(wk waitKey) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for s := range r.subs[wk] {
		if !s.leaving && !s.failed {
			s.again = true
			notify(s.signal)
		}
	}
}

// takeAgain reports and clears whether s must queue again.
func (r *waitRegistry) takeAgain(s *sub) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	again := s.again
	s.again = false
	return again
}

// watchUnserved starts or stops recording grants to waiters that no
// request here serves.
func (r *waitRegistry) watchUnserved(on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.watching = on
	if !on {
		r.unserved = nil
	}
}

// takeUnserved returns and clears the grants recorded so far.
func (r *waitRegistry) takeUnserved() []locktable.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	evs := r.unserved
	r.unserved = nil
	return evs
}

// take returns and clears s's pending events.
func (r *waitRegistry) take(s *sub) (evs []waitEvent, failed bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	evs, s.events = s.events, nil
	return evs, s.failed
}

// has reports whether some request on this node still waits for (key,
// holder). Requests told that leadership was lost do not count: they are
// on their way out, and a queue place kept for them would be granted to
// nobody.
func (r *waitRegistry) has(key, holder string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for s := range r.subs[waitKey{key, holder}] {
		if !s.failed {
			return true
		}
	}
	return false
}

// failAll tells every waiter that this node can no longer serve it.
func (r *waitRegistry) failAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, set := range r.subs {
		for s := range set {
			s.failed = true
			notify(s.signal)
		}
	}
}

func notify(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
