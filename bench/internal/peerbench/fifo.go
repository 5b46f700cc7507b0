package peerbench

import (
	"slices"
	"time"
)

// Wait is one contended acquire as a client saw it: when it started waiting
// and when the grant arrived. Grants on one key are serial, so the order of
// Granted is the order the service granted in.
type Wait struct {
	Client  int
	Start   time.Time
	Granted time.Time
}

// Fairness sums up how a contended key was shared.
type Fairness struct {
	Grants   int
	HandOffs int // grants to a different client than the previous grant
	// Overtaken counts waits that saw at least one later starter (by more
	// than the slack) granted first: each is a FIFO violation.
	Overtaken int
	// MaxOvertakes is the most later starters granted ahead of one wait.
	MaxOvertakes int
	// WorstGap is the longest time by which an overtaker started after the
	// wait it overtook: a few milliseconds is the noise of two requests
	// racing to the server; tens of milliseconds is barging.
	WorstGap    time.Duration
	LongestWait time.Duration
}

// FIFO reports whether no wait was overtaken.
func (f Fairness) FIFO() bool { return f.Grants > 0 && f.Overtaken == 0 }

// MeasureFairness compares the order waits started in with the order they
// were granted. Start times are taken on the client, before the request is
// sent, so two requests that start within slack of each other may reach the
// service in either order; such pairs are not counted as overtakes.
func MeasureFairness(waits []Wait, slack time.Duration) Fairness {
	ws := slices.Clone(waits)
	slices.SortFunc(ws, func(a, b Wait) int { return a.Granted.Compare(b.Granted) })
	f := Fairness{Grants: len(ws)}
	for i, w := range ws {
		if i > 0 && ws[i-1].Client != w.Client {
			f.HandOffs++
		}
		if d := w.Granted.Sub(w.Start); d > f.LongestWait {
			f.LongestWait = d
		}
		// An overtaker started after w and was granted before it, so it was
		// granted inside (w.Start, w.Granted): scan only that window.
		lo, _ := slices.BinarySearchFunc(ws[:i], w.Start, func(x Wait, t time.Time) int { return x.Granted.Compare(t) })
		n := 0
		for _, v := range ws[lo:i] {
			if gap := v.Start.Sub(w.Start); gap > slack {
				n++
				f.WorstGap = max(f.WorstGap, gap)
			}
		}
		if n > 0 {
			f.Overtaken++
			if n > f.MaxOvertakes {
				f.MaxOvertakes = n
			}
		}
	}
	return f
}
