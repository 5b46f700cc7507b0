// Package clock is the time source the server measures leases and
// schedules lease work by: the real clock in production, a Fake that tests
// advance by hand.
package clock

import (
	"sort"
	"sync"
	"time"
)

// Clock tells the time and schedules a function for later.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f in its own goroutine once d has passed (at once
	// if d <= 0), unless the returned Timer is stopped first.
	AfterFunc(d time.Duration, f func()) Timer
}

// AtClock is a Clock that can also schedule a call for an instant. The
// server arms its lease timers this way when the clock offers it: a timer
// armed for d after a reading would fire late if the clock moved between
// the reading and the arming, which a test advancing a fake clock can do.
type AtClock interface {
	Clock
	// AtFunc calls f in its own goroutine once the clock reads t (at once
	// if it already does), unless the returned Timer is stopped first.
	AtFunc(t time.Time, f func()) Timer
}

// Timer is a scheduled call.
type Timer interface {
	// Stop cancels the call; it reports false if the call already ran or
	// was stopped.
	Stop() bool
}

// Real is the system clock (time.Now, time.AfterFunc).
func Real() Clock { return realClock{} }

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// Fake is a clock that moves only when told to; it is an AtClock. Timers
// whose time comes run during Advance or Set, in order of their
// deadlines, on the caller's goroutine; a timer armed for a time already
// reached runs at once in a goroutine of its own, as with the real clock.
// It is safe for concurrent use.
type Fake struct {
	mu     sync.Mutex
	now    time.Time
	seq    uint64
	timers []*fakeTimer
}

// NewFake returns a Fake reading start.
func NewFake(start time.Time) *Fake { return &Fake{now: start} }

type fakeTimer struct {
	f    *Fake
	when time.Time
	seq  uint64 // arming order, for timers due at the same time
	fn   func()
}

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
	return f.at(f.now.Add(d), fn)
}

// AtFunc schedules fn for the fake time t.
func (f *Fake) AtFunc(t time.Time, fn func()) Timer {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.at(t, fn)
}

func (f *Fake) at(when time.Time, fn func()) Timer {
	f.seq++
	t := &fakeTimer{f: f, when: when, seq: f.seq, fn: fn}
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

// Advance moves the fake time forward by d and runs the timers due.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	to := f.now.Add(d)
	f.mu.Unlock()
	f.Set(to)
}

// Set moves the fake time to t (never backwards) and runs the timers due
// by then, each with the clock reading its own deadline.
func (f *Fake) Set(t time.Time) {
	for {
		f.mu.Lock()
		sort.SliceStable(f.timers, func(i, j int) bool {
			a, b := f.timers[i], f.timers[j]
			if !a.when.Equal(b.when) {
				return a.when.Before(b.when)
			}
			return a.seq < b.seq
		})
		if len(f.timers) == 0 || f.timers[0].when.After(t) {
			if t.After(f.now) {
				f.now = t
			}
			f.mu.Unlock()
			return
		}
		next := f.timers[0]
		f.timers = f.timers[1:]
		if next.when.After(f.now) {
			f.now = next.when
		}
		f.mu.Unlock()
		next.fn()
	}
}

// Pending is the number of armed timers.
func (f *Fake) Pending() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.timers)
}
