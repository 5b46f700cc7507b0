package sim

import (
	"flag"
	"strings"
	"testing"
	"testing/synctest"
)

var (
	seeds   = flag.Int("sim.seeds", 0, "run this many seeds (default: 200 in the full run, none with -short)")
	oneSeed = flag.Uint64("sim.seed", 0, "replay this one seed (with -v: print its trace)")
	first   = flag.Uint64("sim.first", 1, "the first seed of a -sim.seeds run")
)

// runSeed runs one world in a synctest bubble: virtual time, and nothing
// of the world outlives it.
func runSeed(t *testing.T, seed uint64, cfg Config) Result {
	t.Helper()
	var res Result
	synctest.Test(t, func(t *testing.T) { res = run(seed, cfg) })
	return res
}

func TestSeeds(t *testing.T) {
	n := *seeds
	if n == 0 {
		if testing.Short() {
			t.Skip("no seeds in -short (go test ./internal/sim -sim.seeds N)")
		}
		n = 200
	}
	if *oneSeed != 0 {
		t.Skip("replaying one seed (TestReplay)")
	}
	failed := 0
	grants := 0
	for s := *first; s < *first+uint64(n); s++ {
		r := runSeed(t, s, DefaultConfig())
		grants += r.Grants
		if len(r.Violations) > 0 {
			failed++
			t.Errorf("%s\nreplay: go test ./internal/sim -run TestReplay -sim.seed %d -v", r, s)
			if failed >= 5 {
				break
			}
		}
	}
	t.Logf("%d seeds from %d, %d grants, %d failed", n, *first, grants, failed)
}

func TestReplay(t *testing.T) {
	if *oneSeed == 0 {
		t.Skip("-sim.seed S replays seed S")
	}
	r := runSeed(t, *oneSeed, DefaultConfig())
	if testing.Verbose() {
		t.Log("trace:\n" + strings.Join(r.Trace, "\n"))
	}
	if len(r.Violations) > 0 {
		t.Error(r)
	}
}

// TestReplayIsExact runs seeds twice: the traces must agree line for line.
func TestReplayIsExact(t *testing.T) {
	for s := uint64(1); s <= 3; s++ {
		a, b := runSeed(t, s, DefaultConfig()), runSeed(t, s, DefaultConfig())
		if a.Digest() != b.Digest() {
			for i := range min(len(a.Trace), len(b.Trace)) {
				if a.Trace[i] != b.Trace[i] {
					t.Fatalf("seed %d: the two runs part at line %d:\n  %s\n  %s", s, i, a.Trace[i], b.Trace[i])
				}
			}
			t.Fatalf("seed %d: traces of %d and %d lines", s, len(a.Trace), len(b.Trace))
		}
	}
}

// found are seeds that found a bug, kept once it was fixed.
var found = []struct {
	seed uint64
	bug  string
}{
	{689, "a waiting acquire whose first answer was lost to an outage dated its grant from the round sent after it (client/queue.go): the holder acted 0.3 s past its lease's end on the server"},
}

func TestFoundSeeds(t *testing.T) {
	for _, f := range found {
		if r := runSeed(t, f.seed, DefaultConfig()); len(r.Violations) > 0 {
			t.Errorf("%s\n(regression of: %s)", r, f.bug)
		}
	}
}
