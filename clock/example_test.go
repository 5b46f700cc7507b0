package clock_test

import (
	"fmt"
	"time"

	"github.com/fencelock/fencelock/clock"
)

// A test moves a Fake by hand; the timers due run inside Advance. The
// server's view is not counted, so Pending speaks of the client's timers.
func ExampleFake() {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	server := clk.Uncounted()
	server.AfterFunc(time.Second, func() { fmt.Println("server timer at", clk.Now().Format(time.TimeOnly)) })
	clk.AfterFunc(2*time.Second, func() { fmt.Println("client timer at", clk.Now().Format(time.TimeOnly)) })
	next, _ := clk.Next()
	fmt.Println("pending:", clk.Pending(), "next in", next)
	clk.Advance(3 * time.Second)
	fmt.Println("pending:", clk.Pending())
	// Output:
	// pending: 1 next in 2s
	// server timer at 00:00:01
	// client timer at 00:00:02
	// pending: 0
}
