package clienttest

import (
	"sort"
	"sync"
	"time"

	"github.com/fencelock/fencelock/client"
)

// Clock is a client.Clock that moves only when told to. AfterFunc callbacks
// run synchronously inside Advance, in deadline order, so a test decides
// exactly which deadlines have passed.
//
// A Server given the Clock measures its leases on it too, and its timers
// (the expiry of leases and waits) run in Advance like the others, but
// Pending, Next and Scheduled leave them out: they count the timers of the
// code under test, which the server's, re-armed as it commits, would blur.
type Clock struct {
	mu     sync.Mutex
	now    time.Time
	seq    int // every timer, for the order of those due together
	armed  int // timers counted by Scheduled
	timers []*timer
}

type timer struct {
	c    *Clock
	at   time.Time
	seq  int
	f    func()
	dead bool
	// server: one of a Server's timers, left out of Pending, Next and
	// Scheduled.
	server bool
}

// NewClock returns a clock standing at an arbitrary fixed instant.
func NewClock() *Clock {
	return &Clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc schedules f at Now()+d; d <= 0 runs it on the next Advance
// (even Advance(0)).
func (c *Clock) AfterFunc(d time.Duration, f func()) client.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	c.armed++
	t := &timer{c: c, at: c.now.Add(d), seq: c.seq, f: f}
	c.timers = append(c.timers, t)
	return t
}

// serverAt schedules one of a Server's timers for at; one already due
// runs at once in a goroutine of its own, as a real timer would.
func (c *Clock) serverAt(at time.Time, f func()) *timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	t := &timer{c: c, at: at, seq: c.seq, f: f, server: true}
	if !at.After(c.now) {
		t.dead = true
		go f()
		return t
	}
	c.timers = append(c.timers, t)
	return t
}

func (t *timer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	if t.dead {
		return false
	}
	t.dead = true
	for i, x := range t.c.timers {
		if x == t {
			t.c.timers = append(t.c.timers[:i], t.c.timers[i+1:]...)
			break
		}
	}
	return true
}

// Jump moves the clock forward by d at once and then runs every callback
// that fell due, all seeing Now() at the end: what a process frozen for d
// (SIGSTOP, a long GC pause) sees when it runs again.
func (c *Clock) Jump(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
	c.Advance(0)
}

// Advance moves the clock forward by d, running every callback that falls
// due, each with Now() at its own deadline.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	end := c.now.Add(d)
	c.mu.Unlock()
	for {
		c.mu.Lock()
		sort.Slice(c.timers, func(i, j int) bool {
			a, b := c.timers[i], c.timers[j]
			if !a.at.Equal(b.at) {
				return a.at.Before(b.at)
			}
			return a.seq < b.seq
		})
		if len(c.timers) == 0 || c.timers[0].at.After(end) {
			c.now = end
			c.mu.Unlock()
			return
		}
		t := c.timers[0]
		c.timers = c.timers[1:]
		t.dead = true
		if t.at.After(c.now) {
			c.now = t.at
		}
		c.mu.Unlock()
		t.f()
	}
}

// Scheduled returns how many callbacks have ever been scheduled (a
// Server's left out), so a test can tell a timer armed anew from one that
// was already pending.
func (c *Clock) Scheduled() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.armed
}

// Pending returns how many callbacks are scheduled (a Server's left out).
func (c *Clock) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, t := range c.timers {
		if !t.server {
			n++
		}
	}
	return n
}

// Next returns how long until the earliest scheduled callback (a Server's
// left out), and false when there is none.
func (c *Clock) Next() (time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var first time.Time
	found := false
	for _, t := range c.timers {
		if !t.server && (!found || t.at.Before(first)) {
			first, found = t.at, true
		}
	}
	if !found {
		return 0, false
	}
	return first.Sub(c.now), true
}
