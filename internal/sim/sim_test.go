package sim

import (
	"flag"
	"os"
	"runtime"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

var (
	seeds   = flag.Int("sim.seeds", 0, "run this many seeds (default: 200 in the full run, none with -short)")
	oneSeed = flag.Uint64("sim.seed", 0, "replay this one seed (with -v: print its trace)")
	first   = flag.Uint64("sim.first", 1, "the first seed of a -sim.seeds run")
	maxFail = flag.Int("sim.maxfail", 5, "a -sim.seeds run stops after this many failing seeds")
	fast    = flag.Float64("sim.fastleader", 0, "plant a clock this much fast (0.25: 25%) on every leader after the first")
	horizon = flag.Duration("sim.horizon", 0, "the virtual time a world's actors and nemesis start work for (default: DefaultConfig's 20s); with -sim.seed, a prefix to replay")
)

// TestMain runs the package on one processor: a world replays exactly
// from its seed only so. With more, goroutines that are ready at one
// instant of virtual time run in parallel and take the world's shared
// locks (and draw from its shared streams) in an order that differs from
// run to run; on one, the scheduler's order is the same each time.
func TestMain(m *testing.M) {
	runtime.GOMAXPROCS(1)
	os.Exit(m.Run())
}

// shortest finds the shortest prefix of seed's world, in virtual time to
// 250 ms, that still fails: the horizon after which the actors and the
// nemesis start nothing new.
func shortest(t *testing.T, seed uint64, cfg Config) time.Duration {
	lo, hi := time.Duration(0), cfg.Horizon // lo passes, hi fails
	for hi-lo > 250*time.Millisecond {
		mid := (lo + hi) / 2
		c := cfg
		c.Horizon = mid
		if len(runSeed(t, seed, c).Violations) > 0 {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}

// runSeed runs one world in a synctest bubble: virtual time, and nothing
// of the world outlives it.
func runSeed(t *testing.T, seed uint64, cfg Config) Result {
	t.Helper()
	var res Result
	synctest.Test(t, func(t *testing.T) { res = run(seed, cfg) })
	res.checkModels()
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
	cfg := DefaultConfig()
	if *horizon > 0 {
		cfg.Horizon = *horizon
	}
	cfg.FastLeader = *fast
	failed := 0
	grants, checked, unchecked := 0, 0, 0
	for s := *first; s < *first+uint64(n); s++ {
		r := runSeed(t, s, cfg)
		grants += r.Grants
		checked += r.Checked
		unchecked += r.Unchecked
		if done := s - *first + 1; done%10000 == 0 && done < uint64(n) {
			t.Logf("%d seeds from %d done, %d grants, %d calls checked, %d failed", done, *first, grants, checked, failed)
		}
		if len(r.Violations) > 0 {
			failed++
			h := shortest(t, s, cfg)
			t.Errorf("%s\nshortest failing prefix: %s of virtual time\nreplay: go test ./internal/sim -run 'TestReplay$' -sim.seed %d -sim.horizon %s -v", r, h, s, h)
			if failed >= *maxFail {
				break
			}
		}
	}
	t.Logf("%d seeds from %d of %s, %d grants, %d calls checked for linearizability (%d histories ran out of time), %d failed", n, *first, cfg.Horizon, grants, checked, unchecked, failed)
}

func TestReplay(t *testing.T) {
	if *oneSeed == 0 {
		t.Skip("-sim.seed S replays seed S")
	}
	cfg := DefaultConfig()
	if *horizon > 0 {
		cfg.Horizon = *horizon
	}
	cfg.Verbose = testing.Verbose()
	r := runSeed(t, *oneSeed, cfg)
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

// found are seeds that show a bug the simulation found, kept once it was
// fixed: each fails in the world as it is now with the bug put back in a
// copy of the module (internal/sim's planted-bug machinery). Each fix has
// a test of its own beside it too; the seed of a bug shifts whenever the
// world's draws change, and is found again the same way.
var found = []struct {
	seed    uint64
	horizon time.Duration // 0: DefaultConfig's
	bug     string
}{
	{2, 0, "a watch's long-poll that no answer came to held the watch for ever (client/watch.go, TestWatchGoesOnAfterALongPollNeverAnswered)"},
	{97, 0, "a new leader released try-once semaphore and read/write grants made in its orphan grace (internal/service/waiters.go, TestTryOnceSharedGrantsSurviveTheOrphanGrace)"},
	{551, 0, "a multi-key acquire delivered twice ran again after a partial release (internal/fsm/dedupe.go, TestAcquireKeysRememberedAcrossAPartialRelease)"},
	{2580, 0, "a call waiting on the ACL question to a frozen leader kept waiting after its node won the election (internal/auth/aclread.go, TestACLWaitEndsWhenThisNodeBecomesLeader)"},
	// Found by the 10 s long run: each round of the keep-alive spent an
	// attempt's timeout on the frozen leader and another on a follower
	// whose call waited on its question to that leader, until a 3 s
	// lease was given up a moment after the election.
	{2054721, 10 * time.Second, keepAliveRounds},
	{2065878, 10 * time.Second, keepAliveRounds},
	{2556438, 10 * time.Second, keepAliveRounds},
	{2610021, 10 * time.Second, keepAliveRounds},
	{2625334, 10 * time.Second, keepAliveRounds},
	{2631380, 10 * time.Second, keepAliveRounds},
	{2638673, 10 * time.Second, keepAliveRounds},
}

const keepAliveRounds = "the keep-alive asked one node at a time, so a leader freeze cost a 3 s lease (client/internal/keepalive/keepalive.go, TestLeaseExtendPassesOverASilentNode)"

func TestFoundSeeds(t *testing.T) {
	for _, f := range found {
		cfg := DefaultConfig()
		if f.horizon > 0 {
			cfg.Horizon = f.horizon
		}
		if r := runSeed(t, f.seed, cfg); len(r.Violations) > 0 {
			t.Errorf("%s\n(regression of: %s)", r, f.bug)
		}
	}
}
