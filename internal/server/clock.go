package server

import "github.com/fencelock/fencelock/internal/clock"

// Clock is the time source of a server's lease work (Config.Clock); see
// package internal/clock for the real one and a fake.
type Clock = clock.Clock

// Timer is a call scheduled on a Clock.
type Timer = clock.Timer

func realClock() Clock { return clock.Real() }
