package clienttest

import (
	"sync"
	"time"

	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/internal/server"
)

// serverClock is the clock a Server measures leases by: c itself, or for a
// *Clock a view of it whose timers are the server's own.
func serverClock(c client.Clock) server.Clock {
	if fc, ok := c.(*Clock); ok {
		return &testView{c: fc}
	}
	return clockView{c}
}

// clockView makes a client.Clock a server.Clock.
type clockView struct{ c client.Clock }

func (v clockView) Now() time.Time { return v.c.Now() }

func (v clockView) AfterFunc(d time.Duration, f func()) server.Timer { return v.c.AfterFunc(d, f) }

// testView is a *Clock as the server sees it. Its timers are dated from
// the latest time it told the server, not from the time when they are
// armed: a test's Advance may move the clock between the server reading
// it and arming a timer for d after that reading, and a timer dated from
// the later time would fire late. A timer so dated is never early, and
// one already due runs at once.
type testView struct {
	c    *Clock
	mu   sync.Mutex
	seen time.Time
}

func (v *testView) Now() time.Time {
	t := v.c.Now()
	v.mu.Lock()
	defer v.mu.Unlock()
	if t.After(v.seen) {
		v.seen = t
	}
	return t
}

func (v *testView) AfterFunc(d time.Duration, f func()) server.Timer {
	v.mu.Lock()
	base := v.seen
	v.mu.Unlock()
	if base.IsZero() {
		base = v.c.Now()
	}
	return v.c.serverAt(base.Add(d), f)
}
