package server

import (
	"io"
	"runtime/debug"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fencelock/fencelock/internal/fsm"
)

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
	// applied, when set, is told how long each log entry took to apply.
	applied func(time.Duration)
	// restored, when set, is called after a snapshot replaced the state
	// (the watch history starts over from it).
	restored func()
}

// Apply is the FSM's Apply, timed for fencelock_apply_seconds.
func (m *memorySignaller) Apply(l *raft.Log) any {
	if m.applied == nil {
		return m.FSM.Apply(l)
	}
	start := time.Now()
	r := m.FSM.Apply(l)
	m.applied(time.Since(start))
	return r
}

// ApplyBatch is the FSM's ApplyBatch, each entry timed as Apply times it.
func (m *memorySignaller) ApplyBatch(logs []*raft.Log) []any {
	if m.applied == nil {
		return m.FSM.ApplyBatch(logs)
	}
	start := time.Now()
	return m.FSM.ApplyBatchFunc(logs, func() {
		now := time.Now()
		m.applied(now.Sub(start))
		start = now
	})
}

func (m *memorySignaller) signal() {
	select {
	case m.freed <- struct{}{}:
	default:
	}
}

func (m *memorySignaller) Restore(rc io.ReadCloser) error {
	defer m.signal()
	err := m.FSM.Restore(rc)
	if err == nil && m.restored != nil {
		m.restored()
	}
	return err
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
