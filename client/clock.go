package client

import "time"

// Clock is the client's source of time. Lease deadlines are measured on it,
// so it must be monotonic: time.Now's readings are, and Sub between two of
// them uses the monotonic reading. Tests inject a fake (see clienttest.Clock)
// and move time explicitly.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f in its own goroutine once d has passed, unless the
	// returned Timer is stopped first.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending AfterFunc.
type Timer interface {
	// Stop prevents the call; it reports false if the call already ran or
	// was already stopped.
	Stop() bool
}

// SystemClock is the real clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// AfterFunc wraps time.AfterFunc.
func (SystemClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// sleep waits d on clock c or until done is closed; it reports whether the
// whole d passed.
func sleep(c Clock, d time.Duration, done <-chan struct{}) bool {
	if d <= 0 {
		return true
	}
	ch := make(chan struct{})
	t := c.AfterFunc(d, func() { close(ch) })
	select {
	case <-ch:
		return true
	case <-done:
		t.Stop()
		return false
	}
}
