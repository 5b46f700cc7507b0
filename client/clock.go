package client

import (
	"time"

	"github.com/fencelock/fencelock/clock"
)

// Clock is the client's source of time, package clock's: lease deadlines
// are measured on it, so it must be monotonic. Tests inject a clock.Fake
// and move time explicitly.
type Clock = clock.Clock

// Timer is a pending AfterFunc.
type Timer = clock.Timer

// SystemClock is the real clock.
type SystemClock = clock.System

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
