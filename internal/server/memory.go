package server

import (
	"runtime"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"sync"
)

// The server's memory policy. Go's collector lets the heap grow to
// (1 + GOGC/100) times what was live after the last collection, so with
// the default GOGC=100 a server holding a million locks (about 180 MB
// live) keeps twice that and more resident. The policy instead gives the
// heap a headroom of its own size only while it is small, and a quarter of
// it once it is large:
//
//	headroom = max(MemoryHeadroomFloor, live/4)
//	GC percent = 100 * headroom / live, at most 100 (the default)
//
// A server with less than MemoryHeadroomFloor live runs exactly as with
// GOGC=100, so the request path of a small table pays nothing. A large
// table is collected more often: at a million locks about every 45 MB
// allocated instead of every 180 MB, each collection marking the whole
// table, which costs CPU (docs/OPERATIONS.md, Memory, has the measured
// price).
const (
	MemoryHeadroomFloor = 32 << 20
	minGCPercent        = 25
)

// gcPercentFor is the GC percent the policy sets for a live heap of live
// bytes.
func gcPercentFor(live uint64) int {
	if live == 0 {
		return 100
	}
	headroom := max(uint64(MemoryHeadroomFloor), live/4)
	return int(min(100, max(minGCPercent, headroom*100/live)))
}

// MemoryPolicyWanted reports whether the policy should run: only when the
// user set neither GOGC nor GOMEMLIMIT, whose choice the server keeps.
func MemoryPolicyWanted(getenv func(string) string) bool {
	return getenv("GOGC") == "" && getenv("GOMEMLIMIT") == ""
}

// StartMemoryPolicy applies the policy after every garbage collection
// from now on, until stop is called; stop restores GC percent 100. It
// changes process-wide settings: call it from a program's main, not from a
// library, and only when MemoryPolicyWanted.
func StartMemoryPolicy() (stop func()) {
	return startMemoryPolicy(nil)
}

// startMemoryPolicy is StartMemoryPolicy that also calls onSet (from the
// cleanup goroutine) with each percent it sets.
func startMemoryPolicy(onSet func(int)) (stop func()) {
	p := &memoryPolicy{percent: 100, onSet: onSet}
	p.arm()
	return func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if !p.stopped {
			p.stopped = true
			debug.SetGCPercent(100)
		}
	}
}

type memoryPolicy struct {
	mu      sync.Mutex
	stopped bool
	percent int // the percent last set
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
	s := []rtmetrics.Sample{{Name: "/gc/heap/live:bytes"}}
	rtmetrics.Read(s)
	if s[0].Value.Kind() == rtmetrics.KindUint64 {
		if want := gcPercentFor(s[0].Value.Uint64()); want != p.percent {
			p.percent = want
			debug.SetGCPercent(want)
			if p.onSet != nil {
				p.onSet(want)
			}
		}
	}
	p.arm()
}
