package lab

import (
	"time"

	"github.com/fencelock/fencelock/internal/pyrand"
)

// stallModel is the page's picture of one lease holder: exponential work,
// then a stall drawn from one of two exponentials. The mixture matters: a
// body of short scheduler hiccups plus a rare tail of long pauses is what the
// lease is really up against, and a single exponential would hide the tail.
type stallModel struct {
	workMean  float64 // seconds
	longShare float64 // probability the stall comes from the long tail
	shortMean float64
	longMean  float64
}

// draw takes exactly the draws the page takes, in its order: work, the coin
// (random() > longShare picks the short stall), then the chosen stall. Each
// rate is 1/mean divided at run time, as the Python does.
func (m stallModel) draw(r *pyrand.Rand) (work, stall float64) {
	work = r.Expovariate(1 / m.workMean)
	if r.Random() > m.longShare {
		stall = r.Expovariate(1 / m.shortMean)
	} else {
		stall = r.Expovariate(1 / m.longMean)
	}
	return work, stall
}

// Block 5's world: 2% of holders hit an ~8 s pause; 0.1% crash.
var (
	sizingModel = stallModel{workMean: 0.5, longShare: 0.02, shortMean: 0.05, longMean: 8.0}
	crashShare  = 0.001
)

// The assembly's world: a harsher tail (5% at ~12 s) against a 5 s lease; a
// stall longer than deadAfter stands for a holder that never comes back.
var (
	assemblyModel = stallModel{workMean: 0.5, longShare: 0.05, shortMean: 0.05, longMean: 12.0}
	assemblyTTL   = 5 * time.Second
	deadAfter     = 30.0 // seconds
)

// holder is one simulated lease holder of block 5.
type holder struct {
	busy    float64 // work + stall: how long it needs the lease
	crashed bool
}

// drawHolders draws block 5's population once. The page re-seeds for every
// TTL, but the draws never depend on the TTL, so one population evaluated at
// each TTL gives the same numbers for a fraction of the work.
func drawHolders(seed int64, n int) []holder {
	r := pyrand.New(seed)
	hs := make([]holder, n)
	for i := range hs {
		work, stall := sizingModel.draw(r)
		hs[i] = holder{busy: work + stall, crashed: r.Random() < crashShare}
	}
	return hs
}

// SizingRow is one lease length of block 5.
type SizingRow struct {
	TTL        time.Duration
	ZombieRate float64 // share of holders that outlive their lease
	WedgePerOp float64 // seconds of blocked progress per operation from crashes
}

// sizeAt scores one TTL. The wedge total is accumulated one TTL per crash,
// in order, rather than multiplied, so the float matches the page's.
func sizeAt(hs []holder, ttl time.Duration) SizingRow {
	t := seconds(ttl)
	zombies, wedged := 0.0, 0.0
	for _, h := range hs {
		if h.busy > t {
			zombies++
		}
		if h.crashed {
			wedged += t
		}
	}
	n := float64(len(hs))
	return SizingRow{TTL: ttl, ZombieRate: zombies / n, WedgePerOp: wedged / n}
}

// Sizing runs block 5's simulation at every TTL of cfg.
func Sizing(cfg Config) ([]SizingRow, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	hs := drawHolders(cfg.SizingSeed, cfg.Ops)
	rows := make([]SizingRow, len(cfg.TTLs))
	for i, ttl := range cfg.TTLs {
		rows[i] = sizeAt(hs, ttl)
	}
	return rows, nil
}

// sizingVerdict names the cost that dominates a row, with the page's
// thresholds: more than 2% zombies, or more than 30 ms wedged per operation.
func sizingVerdict(r SizingRow) string {
	switch {
	case r.ZombieRate > 0.02:
		return "split brain"
	case r.WedgePerOp > 0.03:
		return "slow failover"
	default:
		return "balanced"
	}
}

// operation is one of the assembly's randomised operations.
type operation struct {
	work, stall float64
	when        float64 // where in the operation the stall begins, as a fraction
}

// drawOperations draws the assembly's operations. Each takes a fourth
// uniform draw (the page's unused "crash" value); it is taken and dropped so
// the stream stays the page's.
func drawOperations(seed int64, n int) []operation {
	r := pyrand.New(seed)
	ops := make([]operation, n)
	for i := range ops {
		work, stall := assemblyModel.draw(r)
		ops[i] = operation{work: work, stall: stall, when: r.Random()}
		r.Random()
	}
	return ops
}

// outlivesLease: the operation still runs when its lease runs out.
func (o operation) outlivesLease() bool { return o.work+o.stall > seconds(assemblyTTL) }

// stallAfterCheck reports whether the stall starts once the client's token
// check is done but its write is not. The stall starts at when·(work+gap); the check
// sits at the end of the work, so a start past it lands in the gap and the
// check has already passed: time of check, then time of use.
func (o operation) stallAfterCheck(gap time.Duration) bool {
	return o.when*(o.work+seconds(gap)) > o.work
}
