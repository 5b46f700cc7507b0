package server

import (
	"io"
	"runtime"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"sync"

	"github.com/hashicorp/raft"

	"github.com/fencelock/fencelock/internal/fsm"
)

// The server's memory policy. Go's collector lets the heap grow to
// (1 + GOGC/100) times what was live after the last collection, so with
// the default GOGC=100 a server holding a million locks (about 155 MB
// live) keeps twice that and more resident. The policy gives the heap a
// headroom of at least MemoryHeadroomFloor and at least a quarter of what
// is live, but never more than GOGC=100 would:
//
//	headroom = max(MemoryHeadroomFloor, live/4)
//	GC percent = 100 * headroom / live, between 25 and 100 (the default)
//
// A server with less than MemoryHeadroomFloor live runs exactly as with
// GOGC=100, so the request path of a small table pays nothing. A large
// table is collected more often: at a million locks about every 40 MB
// allocated instead of every 155 MB, each collection marking the whole
// table, which costs CPU while the table is being written
// (docs/BENCHMARKS-peers.md, W4, has the measured price).
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

// bigSnapshot is the size from which writing a snapshot is followed by
// returning freed memory to the operating system. A smaller one leaves
// too little behind to be worth a forced collection.
const bigSnapshot = 8 << 20

// memorySignaller is the FSM as raft sees it, with a Restore and a
// snapshot Release that say when they have left memory behind. A restore
// reads the whole snapshot into memory and builds a new table beside the
// old one; a snapshot holds an encoding of the whole table until written.
// With a million locks that is tens to hundreds of megabytes that the
// collector frees but the process keeps resident: the runtime returns
// freed pages to the system only slowly, and an idle server that no longer
// allocates starts no collection that would let it.
type memorySignaller struct {
	*fsm.FSM
	freed chan<- struct{} // buffered; a pending signal covers later ones
	big   int64           // bigSnapshot, or less in tests
}

func (m *memorySignaller) signal() {
	select {
	case m.freed <- struct{}{}:
	default:
	}
}

func (m *memorySignaller) Restore(rc io.ReadCloser) error {
	defer m.signal()
	return m.FSM.Restore(rc)
}

func (m *memorySignaller) Snapshot() (raft.FSMSnapshot, error) {
	snap, err := m.FSM.Snapshot()
	if err != nil {
		return nil, err
	}
	return &signallingSnapshot{FSMSnapshot: snap, m: m}, nil
}

type signallingSnapshot struct {
	raft.FSMSnapshot
	m *memorySignaller
	n int64 // bytes persisted
}

func (s *signallingSnapshot) Persist(sink raft.SnapshotSink) error {
	return s.FSMSnapshot.Persist(&countingSink{SnapshotSink: sink, n: &s.n})
}

func (s *signallingSnapshot) Release() {
	s.FSMSnapshot.Release()
	if s.n >= s.m.big {
		s.m.signal()
	}
}

type countingSink struct {
	raft.SnapshotSink
	n *int64
}

func (c *countingSink) Write(p []byte) (int, error) {
	n, err := c.SnapshotSink.Write(p)
	*c.n += int64(n)
	return n, err
}

// returnFreedMemory gives memory freed by restores and big snapshots back
// to the operating system, off raft's path: raft restores the last
// snapshot at startup before it serves, and the forced collection of a big
// table takes a noticeable part of a second.
func (s *Server) returnFreedMemory(freed <-chan struct{}) {
	defer s.wg.Done()
	for {
		select {
		case <-s.stop:
			return
		case <-freed:
			debug.FreeOSMemory()
		}
	}
}
