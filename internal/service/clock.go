package service

import (
	"time"

	"github.com/fencelock/fencelock/internal/clock"
)

// Clock is the time source of a server's lease work (Config.Clock); see
// package internal/clock for the real one and a fake.
type Clock = clock.Clock

// Timer is a call scheduled on a Clock.
type Timer = clock.Timer

func realClock() Clock { return clock.Real() }

// afterAt calls f once clk reads t: at that instant if clk can schedule
// one (clock.AtClock, as a fake clock can, so that a test advancing it
// between the server's reading and its arming cannot make the timer
// late), else after t less clk's time now.
func afterAt(clk Clock, t time.Time, f func()) Timer {
	if ac, ok := clk.(clock.AtClock); ok {
		return ac.AtFunc(t, f)
	}
	return clk.AfterFunc(t.Sub(clk.Now()), f)
}
