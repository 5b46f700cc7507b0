package clock

import "time"

// Clock tells the time and schedules a function for later. Lease
// deadlines are measured on it, so it must be monotonic: time.Now's
// readings are, and Sub between two of them uses the monotonic reading.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f in its own goroutine once d has passed (at once
	// if d <= 0), unless the returned Timer is stopped first.
	AfterFunc(d time.Duration, f func()) Timer
}

// AtClock is a Clock that can also schedule a call for an instant. The
// server arms its lease timers this way when the clock offers it: a timer
// armed for d after a reading would fire late if the clock moved between
// the reading and the arming, which a test advancing a Fake can do.
type AtClock interface {
	Clock
	// AtFunc calls f in its own goroutine once the clock reads t (at once
	// if it already does), unless the returned Timer is stopped first.
	AtFunc(t time.Time, f func()) Timer
}

// Timer is a scheduled call.
type Timer interface {
	// Stop cancels the call; it reports false if the call already ran,
	// has started, or was stopped.
	Stop() bool
}

// System is the real clock: time.Now and time.AfterFunc.
type System struct{}

// Now returns time.Now().
func (System) Now() time.Time { return time.Now() }

// AfterFunc wraps time.AfterFunc.
func (System) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }
