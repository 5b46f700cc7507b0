// Package clock forwards to the public package clock
// (github.com/fencelock/fencelock/clock), which is the one to use: these
// aliases only keep internal/server building until it imports that
// package itself, and then this package goes.
package clock

import (
	"time"

	pub "github.com/fencelock/fencelock/clock"
)

// Aliases of the public package's types.
type (
	Clock   = pub.Clock
	AtClock = pub.AtClock
	Timer   = pub.Timer
	Fake    = pub.Fake
)

// Real is the system clock, pub.System.
func Real() Clock { return pub.System{} }

// NewFake is pub.NewFake.
func NewFake(start time.Time) *Fake { return pub.NewFake(start) }
