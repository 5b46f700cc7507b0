package simclock

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/fencelock/fencelock/clock"
)

// Clock is the local clock of one process of the world: virtual time
// (the synctest bubble's) at a rate off by drift, which a pause stops
// from running anything. Now keeps counting through a pause, as a
// monotonic clock does through SIGSTOP; timers that fall due during one
// run when it ends, in the order they were due, before anything else the
// process does.
type Clock struct {
	mu       sync.Mutex
	v0, l0   time.Time // at virtual time v0 the clock read l0
	rate     float64   // local seconds per virtual second (1 + drift)
	paused   bool
	resumed  chan struct{} // closed when the current pause ends
	deferred []*timer      // due during the pause, in due order
	dues     *Dues         // the world's: the instants its pending timers fall due at

	// Debug, if set, traces every timer set (the world's Config.Debug).
	Debug func(format string, args ...any)
}

// Dues are the instants at which the world's pending timers fall due,
// every process's: no two fall due at one instant, so that synctest runs
// what each starts before the next falls due, whatever the scheduler
// would do with two goroutines ready at once.
type Dues struct {
	mu sync.Mutex
	at map[int64]bool
}

// NewDues is a world's Dues, none held.
func NewDues() *Dues { return &Dues{at: map[int64]bool{}} }

// take returns due, or the first free nanosecond after it, and holds it.
func (d *Dues) take(due time.Time) time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	for d.at[due.UnixNano()] {
		due = due.Add(time.Nanosecond)
	}
	d.at[due.UnixNano()] = true
	return due
}

// drop frees due.
func (d *Dues) drop(due time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.at, due.UnixNano())
}

var _ clock.Clock = (*Clock)(nil)

// New is a clock that reads origin now and runs drift off virtual time
// (0.004: 0.4% fast).
func New(origin time.Time, drift float64, d *Dues) *Clock {
	c := &Clock{v0: origin, l0: origin, rate: 1 + drift, resumed: make(chan struct{}), dues: d}
	close(c.resumed)
	return c
}

// Now is the local reading of virtual time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nowLocked(time.Now())
}

func (c *Clock) nowLocked(v time.Time) time.Time {
	return c.l0.Add(time.Duration(float64(v.Sub(c.v0)) * c.rate))
}

// SetRate makes the clock run at rate from now on, without a jump.
func (c *Clock) SetRate(rate float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v := time.Now()
	c.l0, c.v0, c.rate = c.nowLocked(v), v, rate
}

// Step moves the clock's reading by d at once (back, if negative), as
// a clock stepped by an operator or a time daemon is; its rate is kept.
// Timers already set fall due when they would have.
func (c *Clock) Step(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.l0 = c.l0.Add(d)
}

// Virtual converts a local duration into the virtual time it takes.
func (c *Clock) Virtual(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	c.mu.Lock()
	rate := c.rate
	c.mu.Unlock()
	v := time.Duration(float64(d) / rate)
	if float64(v)*rate < float64(d) {
		v++ // never early by local time
	}
	return v
}

// AfterFunc runs f once d has passed on the local clock (late, after a
// pause).
//
// Timers a process sets for one moment from different instants (attempts
// clamped to one deadline) would fall due together, and fire in whatever
// order the scheduler runs their goroutines: each is late by up to half
// a microsecond more, drawn from when it was set and for how long, so
// that they fire one at a time.
func (c *Clock) AfterFunc(d time.Duration, f func()) clock.Timer {
	now := time.Now()
	late := time.Duration(1 + splitmix(uint64(now.UnixNano())^uint64(d)*0x9e3779b97f4a7c15)%512)
	// Timers set from a chain of others (a hedge every third of an
	// attempt's timeout), or by two processes, can still meet: one
	// instant, one timer.
	due := c.dues.take(now.Add(c.Virtual(d) + late))
	t := &timer{c: c, f: f, due: due}
	t.t = time.AfterFunc(due.Sub(now), t.fire)
	if c.Debug != nil {
		c.Debug("timer %s due %s", d, time.Duration(t.due.UnixNano()-946684800000000000))
	}
	return t
}

type timer struct {
	c   *Clock
	f   func()
	due time.Time
	t   *time.Timer

	stopped bool // under c.mu
	ran     bool
}

func (t *timer) fire() {
	c := t.c
	c.mu.Lock()
	if t.stopped || t.ran {
		c.mu.Unlock()
		return
	}
	c.dues.drop(t.due)
	if c.paused {
		c.deferred = append(c.deferred, t)
		c.mu.Unlock()
		return
	}
	t.ran = true
	c.mu.Unlock()
	t.f()
}

// Stop cancels the timer; it reports whether that stopped it from running.
func (t *timer) Stop() bool {
	c := t.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.stopped || t.ran {
		return false
	}
	t.stopped = true
	t.t.Stop()
	c.dues.drop(t.due)
	return true
}

// Pause stops the process: nothing its timers would run runs until
// resume.
func (c *Clock) Pause() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.paused {
		c.paused = true
		c.resumed = make(chan struct{})
	}
}

// Resume runs what fell due during the pause, in due order, then lets the
// process go on.
func (c *Clock) Resume() {
	c.mu.Lock()
	if !c.paused {
		c.mu.Unlock()
		return
	}
	due := c.deferred
	c.deferred = nil
	slices.SortStableFunc(due, func(a, b *timer) int { return a.due.Compare(b.due) })
	var run []*timer
	for _, t := range due {
		if !t.stopped && !t.ran {
			t.ran = true
			run = append(run, t)
		}
	}
	c.paused = false
	close(c.resumed)
	c.mu.Unlock()
	for _, t := range run {
		t.f()
	}
}

// Running returns a channel closed while the process runs (at once, or
// when the current pause ends).
func (c *Clock) Running() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.resumed
}

// splitmix is SplitMix64's finaliser (the world's own draws use it too).
func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// Sleep waits d of the bubble's virtual time, or until ctx ends; it
// reports whether the whole d passed (at once for d ≤ 0, if ctx has not
// ended).
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
