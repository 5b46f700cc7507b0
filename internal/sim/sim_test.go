package sim

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"testing/cryptotest"
	"testing/synctest"
	"time"
)

var (
	seeds       = flag.Int("sim.seeds", 0, "run this many seeds (default: 200, 10 with -short)")
	plantName   = flag.String("sim.plant", "", "with -tags simbugs: the planted bug to run the seeds with (planted_simbugs_test.go)")
	focus       = flag.String("sim.focus", "", "weigh the nemesis toward one kind of fault: rot, leases, membership, failover, clock")
	aclOn       = flag.Bool("sim.acl", false, "ACLs on in every world (else a quarter of them draw it)")
	streamOn    = flag.Bool("sim.stream", false, "the watcher watches over the event stream in every world (else half of them draw it)")
	quotasOn    = flag.Bool("sim.quotas", false, "quotas on in every world with ACLs (else half of them draw them)")
	flips       = flag.Bool("sim.flips", true, "a third of the restarts read a flipped bit now and then (-sim.flips=false: none; see RELIABILITY.md)")
	syncForget  = flag.Bool("sim.syncforget", false, "a failed sync drops what it was to write, as Linux's does (see RELIABILITY.md)")
	oneSeed     = flag.Uint64("sim.seed", 0, "replay this one seed (with -v: print its trace)")
	first       = flag.Uint64("sim.first", 1, "the first seed of a -sim.seeds run")
	maxFail     = flag.Int("sim.maxfail", 5, "a -sim.seeds run stops after this many failing seeds")
	fast        = flag.Float64("sim.fastleader", 0, "plant a clock this much fast (0.25: 25%) on every leader after the first")
	debugTrace  = flag.Bool("sim.debug", false, "with -sim.seed: trace every request a client sends too")
	replaySeeds = flag.Int("sim.replayseeds", 0, "TestReplayIsExact: how many seeds (default: 100, in the slow tier only)")
	replayRuns  = flag.Int("sim.replayruns", 3, "TestReplayIsExact: how many runs of each")
	slowFlag    = flag.Bool("sim.slow", false, "the slow tier: TestReplayIsExact over 100 seeds, TestPlantedBugsAreCaught (also FENCELOCK_SIM_SLOW=1)")
	writes      = flag.String("sim.writes", "sync", "how the engine writes its log: sync (the default, as the product), async (--etcd-async-writes), or draw (each seed draws one)")
	horizon     = flag.Duration("sim.horizon", 0, "the virtual time a world's actors and nemesis start work for (default: DefaultConfig's 20s); with -sim.seed, a prefix to replay")
)

// slow says whether the slow tier runs: -sim.slow, or FENCELOCK_SIM_SLOW=1
// in the environment (for a `go test ./...` that cannot pass the flag).
func slow() bool { return *slowFlag || os.Getenv("FENCELOCK_SIM_SLOW") == "1" }

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
	cryptotest.SetGlobalRandom(t, seed)
	// No collection inside a world: one stops the world at a moment of
	// real time, and the goroutines it paused may resume in another
	// order. The heap is collected between worlds instead.
	gc := debug.SetGCPercent(-1)
	synctest.Test(t, func(t *testing.T) { res = run(seed, cfg) })
	debug.SetGCPercent(gc)
	runtime.GC()
	res.checkModels()
	return res
}

func TestSeeds(t *testing.T) {
	n := *seeds
	if n == 0 {
		n = 200
		if testing.Short() {
			n = 10
		}
	}
	if *oneSeed != 0 {
		t.Skip("replaying one seed (TestReplay)")
	}
	cfg := flagConfig()
	plantFromFlag(t)
	var sum summary
	for s := *first; s < *first+uint64(n); s++ {
		r := runSeed(t, s, cfg)
		sum.add(r)
		if r.Faults.RefusedOther > 0 && testing.Verbose() {
			t.Logf("seed %d: %d starts refused on a damaged disk other than as a DataDirError", s, r.Faults.RefusedOther)
		}
		if r.Faults.RotUnseen > 0 && testing.Verbose() {
			t.Logf("seed %d: %d restarts lost entries to damage after the watermark", s, r.Faults.RotUnseen)
		}
		if done := s - *first + 1; done%10000 == 0 && done < uint64(n) {
			t.Logf("%d seeds from %d done, %d grants, %d calls checked, %d failed", done, *first, sum.grants, sum.checked, sum.failed)
		}
		if len(r.Violations) > 0 {
			t.Errorf("%s\n%s", r, replayCommand(t, s, cfg))
			if sum.failed >= *maxFail {
				break
			}
		}
	}
	t.Logf("seeds %d.. of %s: %d grants, %d calls checked for linearizability (%d histories ran out of time)",
		*first, cfg.Horizon, sum.grants, sum.checked, sum.unchecked)
	fmt.Println(sum.line())
}

// flagConfig is DefaultConfig as the flags change it.
func flagConfig() Config {
	cfg := DefaultConfig()
	if *horizon > 0 {
		cfg.Horizon = *horizon
	}
	cfg.FastLeader = *fast
	cfg.SyncForget = *syncForget
	cfg.Flips = *flips
	cfg.ACL = *aclOn
	cfg.Quotas = *quotasOn
	cfg.Stream = *streamOn
	cfg.Focus = *focus
	cfg.Writes = *writes
	return cfg
}

// summary adds up worlds.
type summary struct {
	worlds, failed             int
	grants, checked, unchecked int
	faults                     faultCounts
}

func (s *summary) add(r Result) {
	s.worlds++
	if len(r.Violations) > 0 {
		s.failed++
	}
	s.grants += r.Grants
	s.checked += r.Checked
	s.unchecked += r.Unchecked
	s.faults.add(r.Faults)
}

// line is a run's last line: the worlds, how many failed, and every
// kind of fault injected.
func (s summary) line() string {
	f := s.faults
	return fmt.Sprintf("sim: %d worlds, failed=%d, engine=etcd, faults: crash=%d freeze=%d partition=%d disk=%d membership=%d acl=%d clock=%d power=%d rot=%d client=%d (starts refused on a damaged disk=%d, halts on a disk fault=%d, calls refused by a quota=%d)",
		s.worlds, s.failed, f.Crash, f.Freeze, f.Partition, f.Disk, f.Membership, f.ACL, f.Clock, f.Power, f.Rot, f.Client, f.Refused, f.Halted, f.Quota)
}

// replayCommand is the one command that replays seed's failure with its
// trace: of the shortest prefix of its world that still fails.
func replayCommand(t *testing.T, seed uint64, cfg Config) string {
	h := shortest(t, seed, cfg)
	cmd := fmt.Sprintf("go test ./internal/sim -run 'TestReplay$' -v -sim.seed %d -sim.horizon %s", seed, h)
	if cfg.FastLeader > 0 {
		cmd += fmt.Sprintf(" -sim.fastleader %g", cfg.FastLeader)
	}
	if cfg.SyncForget {
		cmd += " -sim.syncforget"
	}
	if !cfg.Flips {
		cmd += " -sim.flips=false"
	}
	if cfg.ACL && *aclOn {
		cmd += " -sim.acl"
	}
	if cfg.Stream && *streamOn {
		cmd += " -sim.stream"
	}
	if cfg.Quotas && *quotasOn {
		cmd += " -sim.quotas"
	}
	if cfg.Focus != "" {
		cmd += " -sim.focus " + cfg.Focus
	}
	if cfg.Writes != "" && cfg.Writes != "sync" {
		cmd += " -sim.writes " + cfg.Writes
	}
	return "replay: " + cmd
}

func TestReplay(t *testing.T) {
	if *oneSeed == 0 {
		t.Skip("-sim.seed S replays seed S")
	}
	cfg := flagConfig()
	plantFromFlag(t)
	cfg.Verbose = testing.Verbose()
	cfg.Debug = *debugTrace
	r := runSeed(t, *oneSeed, cfg)
	if testing.Verbose() {
		t.Log("trace:\n" + strings.Join(r.Trace, "\n"))
	}
	if len(r.Violations) > 0 {
		t.Error(r)
	}
}

// TestReplayIsExact runs each of replaySeeds seeds replayRuns times: the
// traces must agree line for line. The default tier replays 10 seeds
// twice (with -short, 3); the slow tier 100 seeds three times.
func TestReplayIsExact(t *testing.T) {
	seeds, runs := uint64(*replaySeeds), *replayRuns
	if seeds == 0 {
		seeds, runs = 10, 2
		if testing.Short() {
			seeds = 3
		}
		if slow() {
			seeds, runs = 100, *replayRuns
		}
	}
	for s := uint64(1); s <= seeds; s++ {
		first := runSeed(t, s, DefaultConfig())
		for range runs - 1 {
			again := runSeed(t, s, DefaultConfig())
			if again.Digest() == first.Digest() {
				continue
			}
			for i := range min(len(first.Trace), len(again.Trace)) {
				if first.Trace[i] != again.Trace[i] {
					t.Fatalf("seed %d: the runs part at line %d:\n  %s\n  %s", s, i, first.Trace[i], again.Trace[i])
				}
			}
			t.Fatalf("seed %d: traces of %d and %d lines", s, len(first.Trace), len(again.Trace))
		}
	}
}

// found are seeds that showed a bug the simulation found, kept once it
// was fixed; each fix has a test of its own beside it too. The seed of a
// bug shifts whenever the world's draws change: each is found again by
// putting the bug back (see RELIABILITY.md). The world before issue 42's
// (a model of raft) found four bugs and seven seeds of a fifth; their
// seeds meant nothing in this world and were dropped with it.
var found = []struct {
	seed    uint64
	horizon time.Duration // 0: DefaultConfig's
	bug     string
	focus   string // with Shaped off: three nodes, the default TTLs
	shaped  bool   // with a focus, Shaped kept on: the seed draws its world
	every   bool   // ACLs, quotas and the event stream on (-sim.acl -sim.quotas -sim.stream)
}{
	{226, 14843750 * time.Microsecond, "with a node down for good, a keep-alive whose round met only refusals and silence asked the dead node alone until a 3 s lease was given up (client/keepalive.go judgeExtension, TestLeaseExtendAsksSilentNodesAgainWhenTheOthersRefuse)", "", false, false},
	// The world's own check: a client's fault still going on when the
	// world ended was never recorded, so the lease it cost was judged
	// lost for no cause (nemesis.go: faults are recorded open).
	{220, 0, "a lease lost in a client's fault that outlasted the world was judged lost for no cause (the check, nemesis.go)", focusLeases, false, false},
	// Rot in synced log entries after the state file's watermark, which
	// raft-wal dropped as a torn tail: the node applied another entry at
	// an index it had applied (internal/node waltail.go; the unit tests
	// beside it: TestSyncedEntriesDamagedAfterTheWatermarkRefused).
	{264, 0, "a node dropped synced entries that rotted after its watermark as a torn tail, then applied others at their indexes (internal/node waltail.go)", focusRot, true, false},
	{275, 0, "a node dropped synced entries that rotted after its watermark as a torn tail, then applied others at their indexes (internal/node waltail.go)", focusRot, true, false},
	// The world's own check: an ACL fault that began before the
	// operator had given the clients their tokens recorded a token
	// deletion with no secret, which the check took for rules taken
	// away and never given back (acl.go: the fault waits for the
	// tokens).
	// The world's own check: a giving back of the rules from one fault
	// that was still under way when the next fault took them away again
	// may have been applied after it (acl.go, rulesGoneBy).
	{240, 5156250 * time.Microsecond, "an answer under rules a slow giving back had restored after the next fault took them away was judged (the check, acl.go)", "", false, true},
	// The world's own operator: a bootstrap applied but not answered
	// was tried again, refused as already done, and taken for a failure
	// (acl.go, bootACL).
	{456, 3750 * time.Millisecond, "the ACLs' bootstrap, applied but not answered, was tried again and its refusal taken for a failure (the world's operator, acl.go)", "", false, true},
	{276, 2500 * time.Millisecond, "a token deleted before the ACLs' setup was over was judged as lock rules taken away for good (the check, acl.go)", "", false, true},
	// Rot in a snapshot's meta.json turned its index 37 into an earlier
	// one: the state's CRC does not cover the index, so the node took
	// the snapshot for one of an earlier entry and started without
	// entry 37 (internal/node snapstore.go: meta.json's own checksum,
	// TestSnapshotMetaChecksum).
	// The world's own operator: three elections at the start outlasted
	// one round of its tries to bootstrap the ACLs (acl.go, bootACL).
	{3008524, 0, "the world's operator gave the ACLs' bootstrap up while three elections at the start had no ready leader (acl.go, bootACL)", "", false, false},
	{3000926, 2656250 * time.Microsecond, "a bit flipped in a snapshot's index in meta.json passed for another snapshot, and the node started without an entry (internal/node snapstore.go MetaCRC)", "", false, false},
}

func TestFoundSeeds(t *testing.T) {
	for _, f := range found {
		cfg := DefaultConfig()
		if f.horizon > 0 {
			cfg.Horizon = f.horizon
		}
		if f.focus != "" {
			cfg.Shaped, cfg.Focus = f.shaped, f.focus
		}
		cfg.ACL, cfg.Quotas, cfg.Stream = f.every, f.every, f.every
		if r := runSeed(t, f.seed, cfg); len(r.Violations) > 0 {
			t.Errorf("%s\n(regression of: %s)", r, f.bug)
		}
	}
}
