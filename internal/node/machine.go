package node

import (
	"io"
	"runtime/debug"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fencelock/fencelock/internal/fsm"
)

// machine is the state machine as raft drives it on this node: the
// replicated FSM, and what this node does around it.
//
//   - Each applied entry is timed (Hooks.Applied).
//   - With a data directory, the token ceiling is raised past every token
//     a batch issued before raft answers any of its entries (tokenFloor).
//   - After a snapshot replaced the state, the owner is told
//     (Hooks.Restored: the watch history starts over from it).
//   - A restore, and a big snapshot once written, ask for freed memory to
//     be returned to the operating system. A restore reads the whole
//     snapshot into memory and builds a new table beside the old one; a
//     snapshot holds an encoding of the whole table until written. With a
//     million locks that is tens to hundreds of megabytes that the
//     collector frees but the process keeps resident: the runtime returns
//     freed pages only slowly, and an idle server that no longer
//     allocates starts no collection that would let it.
type machine struct {
	fsm   *fsm.FSM
	floor *tokenFloor // nil without a data dir
	hooks Hooks
	freed chan struct{} // 1-buffered; a pending signal covers later ones
	big   int64         // bigSnapshot, or less in tests
}

// bigSnapshot is the size from which writing a snapshot is followed by
// returning freed memory to the operating system. A smaller one leaves
// too little behind to be worth a forced collection.
const bigSnapshot = 8 << 20

func newMachine(f *fsm.FSM, floor *tokenFloor, hooks Hooks) *machine {
	return &machine{fsm: f, floor: floor, hooks: hooks, freed: make(chan struct{}, 1), big: bigSnapshot}
}

func (m *machine) reserve() {
	if m.floor != nil {
		m.floor.reserve(m.fsm.LastToken())
	}
}

// Apply applies one entry (raft calls ApplyBatch; this is for raft's
// FSM interface and for tests).
func (m *machine) Apply(l *raft.Log) any {
	start := time.Now()
	r := m.fsm.Apply(l)
	if m.hooks.Applied != nil {
		m.hooks.Applied(time.Since(start))
	}
	m.reserve()
	return r
}

// ApplyBatch applies a batch, each entry timed, then reserves once for
// every token it issued, still before raft answers any of its entries.
func (m *machine) ApplyBatch(logs []*raft.Log) []any {
	var out []any
	if m.hooks.Applied == nil {
		out = m.fsm.ApplyBatch(logs)
	} else {
		start := time.Now()
		out = m.fsm.ApplyBatchFunc(logs, func() {
			now := time.Now()
			m.hooks.Applied(now.Sub(start))
			start = now
		})
	}
	m.reserve()
	return out
}

func (m *machine) signal() {
	select {
	case m.freed <- struct{}{}:
	default:
	}
}

func (m *machine) Restore(rc io.ReadCloser) error {
	defer m.signal()
	err := m.fsm.Restore(rc)
	m.reserve()
	if err == nil && m.hooks.Restored != nil {
		m.hooks.Restored()
	}
	return err
}

func (m *machine) Snapshot() (raft.FSMSnapshot, error) {
	snap, err := m.fsm.Snapshot()
	if err != nil {
		return nil, err
	}
	return &signallingSnapshot{FSMSnapshot: snap, m: m}, nil
}

type signallingSnapshot struct {
	raft.FSMSnapshot
	m *machine
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
func (m *machine) returnFreedMemory(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case <-m.freed:
			debug.FreeOSMemory()
		}
	}
}
