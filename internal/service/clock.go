package service

import (
	"time"

	"github.com/fencelock/fencelock/clock"
)

// afterAt calls f once clk reads t: at that instant if clk can schedule
// one (clock.AtClock, as a fake clock can, so that a test advancing it
// between the server's reading and its arming cannot make the timer
// late), else after t less clk's time now.
func afterAt(clk clock.Clock, t time.Time, f func()) clock.Timer {
	if ac, ok := clk.(clock.AtClock); ok {
		return ac.AtFunc(t, f)
	}
	return clk.AfterFunc(t.Sub(clk.Now()), f)
}
