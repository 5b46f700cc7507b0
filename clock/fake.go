package clock

import (
	"sync"
	"time"
)

// Fake is a clock that moves only when told to; it is an AtClock. Timers
// whose time comes run during Advance, Set or Jump, in order of their
// deadlines (in arming order when equal), on the caller's goroutine, so
// a test knows which have run when the call returns. A timer armed for a
// time already reached runs at once in a goroutine of its own, as with
// the real clock. It is safe for concurrent use.
type Fake struct {
	mu        sync.Mutex
	now       time.Time
	seq       uint64 // every arming, for the order of timers due together
	scheduled int    // counted armings, for Scheduled
	timers    []*fakeTimer
}

type fakeTimer struct {
	f       *Fake
	when    time.Time
	seq     uint64
	fn      func()
	counted bool // armed on the Fake itself, not on its Uncounted view
}

// NewFake returns a Fake reading start.
func NewFake(start time.Time) *Fake { return &Fake{now: start} }

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// AfterFunc schedules fn for d after the fake time.
func (f *Fake) AfterFunc(d time.Duration, fn func()) Timer {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.armLocked(f.now.Add(d), fn, true)
}

// AtFunc schedules fn for the fake time t.
func (f *Fake) AtFunc(t time.Time, fn func()) Timer {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.armLocked(t, fn, true)
}

func (f *Fake) armLocked(when time.Time, fn func(), counted bool) Timer {
	f.seq++
	if counted {
		f.scheduled++
	}
	t := &fakeTimer{f: f, when: when, seq: f.seq, fn: fn, counted: counted}
	if !when.After(f.now) {
		go fn()
		return t
	}
	f.timers = append(f.timers, t)
	return t
}

// Stop cancels t.
func (t *fakeTimer) Stop() bool {
	f := t.f
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, o := range f.timers {
		if o == t {
			f.timers = append(f.timers[:i], f.timers[i+1:]...)
			return true
		}
	}
	return false
}

// Advance moves the fake time forward by d and runs the timers due by
// then, each with the clock reading its own deadline.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	to := f.now.Add(d)
	f.mu.Unlock()
	f.Set(to)
}

// Jump moves the fake time forward by d at once and then runs the timers
// that fell due, every one of them seeing the time at the end: what a
// process frozen for d (SIGSTOP, a long GC pause) sees when it runs
// again.
func (f *Fake) Jump(d time.Duration) {
	f.mu.Lock()
	f.now = f.now.Add(d)
	to := f.now
	f.mu.Unlock()
	f.Set(to)
}

// Set moves the fake time to t (never backwards) and runs the timers due
// by then, each with the clock reading its own deadline (or the time
// already reached, if that is later). A timer armed by one that runs
// runs in the same call when it falls due by t.
func (f *Fake) Set(t time.Time) {
	for {
		f.mu.Lock()
		i := f.firstLocked(nil)
		if i < 0 || f.timers[i].when.After(t) {
			if t.After(f.now) {
				f.now = t
			}
			f.mu.Unlock()
			return
		}
		next := f.timers[i]
		f.timers = append(f.timers[:i], f.timers[i+1:]...)
		if next.when.After(f.now) {
			f.now = next.when
		}
		f.mu.Unlock()
		next.fn()
	}
}

// firstLocked is the index of the earliest pending timer that keep
// accepts (nil: any), or -1.
func (f *Fake) firstLocked(keep func(*fakeTimer) bool) int {
	first := -1
	for i, t := range f.timers {
		if keep != nil && !keep(t) {
			continue
		}
		if first < 0 || t.when.Before(f.timers[first].when) ||
			(t.when.Equal(f.timers[first].when) && t.seq < f.timers[first].seq) {
			first = i
		}
	}
	return first
}

func counted(t *fakeTimer) bool { return t.counted }

// Pending is the number of armed timers that have not run, those of the
// Uncounted view left out.
func (f *Fake) Pending() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, t := range f.timers {
		if t.counted {
			n++
		}
	}
	return n
}

// Next returns how long until the earliest pending timer is due, those of
// the Uncounted view left out, and false when there is none.
func (f *Fake) Next() (time.Duration, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	i := f.firstLocked(counted)
	if i < 0 {
		return 0, false
	}
	return f.timers[i].when.Sub(f.now), true
}

// Scheduled returns how many timers have ever been armed, those of the
// Uncounted view left out, so that a test can tell a timer armed anew
// from one that was already pending.
func (f *Fake) Scheduled() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.scheduled
}

// Uncounted returns a view of f for code whose timers a test does not
// want counted, typically a server running beside the client under test,
// whose lease timers are re-armed as it commits. The view reads f's time,
// and its timers run in f's Advance, Set and Jump like any other, but
// Pending, Next and Scheduled leave them out.
func (f *Fake) Uncounted() AtClock { return uncounted{f} }

type uncounted struct{ f *Fake }

func (u uncounted) Now() time.Time { return u.f.Now() }

func (u uncounted) AfterFunc(d time.Duration, fn func()) Timer {
	u.f.mu.Lock()
	defer u.f.mu.Unlock()
	return u.f.armLocked(u.f.now.Add(d), fn, false)
}

func (u uncounted) AtFunc(t time.Time, fn func()) Timer {
	u.f.mu.Lock()
	defer u.f.mu.Unlock()
	return u.f.armLocked(t, fn, false)
}
