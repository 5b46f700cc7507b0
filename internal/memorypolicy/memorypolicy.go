// Package memorypolicy is the fencelock server's process-wide GC policy.
// Go's collector lets the heap grow to (1 + GOGC/100) times what was live after the last collection, so with
// the default GOGC=100 a server holding a million locks (about 140 MB
// live) keeps twice that and more resident. The policy gives the heap a
// headroom of at least HeadroomFloor and at least a quarter of what
// is live, but never more than GOGC=100 would:
//
//	headroom = max(HeadroomFloor, live/4)
//	GC percent = 100 * headroom / live, between 25 and 100 (the default)
//
// A server with less than HeadroomFloor live runs exactly as with
// GOGC=100, so the request path of a small table pays nothing. A large
// table is collected more often: at a million locks about every 35 MB
// allocated instead of every 140 MB, each collection marking the whole
// table, which costs CPU while the table is being written
// (docs/BENCHMARKS-peers.md, W4, has the measured price).
package memorypolicy

import (
	"runtime"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"sync"
	"sync/atomic"
)

const (
	// HeadroomFloor is the least headroom the policy leaves the heap.
	HeadroomFloor = 32 << 20
	minGCPercent  = 25
)

// gcPercentFor is the GC percent the policy sets for a live heap of live
// bytes.
func gcPercentFor(live uint64) int {
	if live == 0 {
		return 100
	}
	headroom := max(uint64(HeadroomFloor), live/4)
	return int(min(100, max(minGCPercent, headroom*100/live)))
}

// Wanted reports whether the policy should run: only when the
// user set neither GOGC nor GOMEMLIMIT, whose choice the server keeps.
func Wanted(getenv func(string) string) bool {
	return getenv("GOGC") == "" && getenv("GOMEMLIMIT") == ""
}

// Start applies the policy after every garbage collection
// from now on, until stop is called; stop restores GC percent 100. It
// changes process-wide settings: call it from a program's main, not from a
// library, and only when Wanted.
func Start() (stop func()) {
	return start(nil)
}

// running is the policy Start started and has not stopped; nil: none.
var running atomic.Pointer[memoryPolicy]

// start is Start that also calls onSet (from the
// cleanup goroutine) with each percent it sets.
func start(onSet func(int)) (stop func()) {
	p := &memoryPolicy{percent: 100, onSet: onSet}
	running.Store(p)
	p.arm()
	return func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if !p.stopped {
			p.stopped = true
			running.CompareAndSwap(p, nil)
			debug.SetGCPercent(100)
		}
	}
}

// Relax leaves the collector at GC percent 100 until release is called,
// when a policy runs; without one it does nothing. It is for a phase
// that builds a large heap in one go, a restart's replay of its log: the
// table grows from nothing to its full size, and a collection every
// quarter of the live heap marks it over and over (a million locks: 13.1
// against 9.6 CPU seconds, docs/BENCHMARKS.md, issue 45 item 5). Once
// released, the policy applies again at once; the heap grown meanwhile
// is given back by the next collection that returns memory. Relaxes may
// overlap; release may be called more than once.
func Relax() (release func()) {
	p := running.Load()
	if p == nil {
		return func() {}
	}
	p.mu.Lock()
	p.relaxed++
	p.setLocked(100)
	p.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			p.relaxed--
			p.applyLocked()
		})
	}
}

type memoryPolicy struct {
	mu      sync.Mutex
	stopped bool
	percent int // the percent last set
	relaxed int // Relax calls not yet released
	onSet   func(int)
}

// gcSentinel is garbage as soon as arm returns, so its cleanup runs after
// the next collection. It is big enough to stay out of the tiny
// allocator, whose objects may never be cleaned up.
type gcSentinel struct{ _ [32]byte }

func (p *memoryPolicy) arm() {
	runtime.AddCleanup(new(gcSentinel), func(p *memoryPolicy) { p.afterGC() }, p)
}

// afterGC runs once per collection, on the runtime's cleanup goroutine.
func (p *memoryPolicy) afterGC() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return
	}
	p.applyLocked()
	p.arm()
}

// applyLocked sets the percent the live heap of the last collection asks
// for, or 100 while relaxed. p.mu is held.
func (p *memoryPolicy) applyLocked() {
	if p.stopped {
		return
	}
	if p.relaxed > 0 {
		p.setLocked(100)
		return
	}
	s := []rtmetrics.Sample{{Name: "/gc/heap/live:bytes"}}
	rtmetrics.Read(s)
	if s[0].Value.Kind() == rtmetrics.KindUint64 {
		p.setLocked(gcPercentFor(s[0].Value.Uint64()))
	}
}

func (p *memoryPolicy) setLocked(want int) {
	if p.stopped || want == p.percent {
		return
	}
	p.percent = want
	debug.SetGCPercent(want)
	if p.onSet != nil {
		p.onSet(want)
	}
}
