package node

import (
	"fmt"
	"io"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/memorypolicy"
	"github.com/fencelock/fencelock/internal/plant"
)

// Machine is the state machine as an engine drives it on this node: the
// replicated FSM, and what this node does around it. Both engines apply
// through it, each adapting its own log entries to fsm.Entry.
//
//   - Each applied entry is timed (Hooks.Applied).
//   - With a data directory, the token ceiling is raised past every token
//     a batch issued before the engine answers any of its entries
//     (tokenFloor).
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
type Machine struct {
	fsm    *fsm.FSM
	floor  *tokenFloor // nil without a data dir
	hooks  Hooks
	freed  chan struct{} // 1-buffered; a pending signal covers later ones
	big    int64         // bigSnapshot, or less in tests
	replay atomic.Pointer[replay]
}

// replay is a start-up replay under way (Replaying).
type replay struct {
	to      uint64
	release func()
}

// bigSnapshot is the size from which writing a snapshot is followed by
// returning freed memory to the operating system. A smaller one leaves
// too little behind to be worth a forced collection.
const bigSnapshot = 8 << 20

func newMachine(f *fsm.FSM, floor *tokenFloor, hooks Hooks) *Machine {
	return &Machine{fsm: f, floor: floor, hooks: hooks, freed: make(chan struct{}, 1), big: bigSnapshot}
}

func (m *Machine) reserve() {
	if m.floor != nil {
		m.floor.reserve(m.fsm.LastToken())
	}
}

// ApplyBatch applies a batch of committed entries, each timed, then
// reserves once for every token it issued, still before the engine
// answers any of its entries. The results are fsm.ApplyBatch's: nil
// when every entry is Unanswered.
func (m *Machine) ApplyBatch(ents []fsm.Entry) []fsm.Result {
	var out []fsm.Result
	if m.hooks.Applied == nil {
		out = m.fsm.ApplyBatch(ents, nil)
	} else {
		start := time.Now()
		out = m.fsm.ApplyBatch(ents, func() {
			now := time.Now()
			m.hooks.Applied(now.Sub(start))
			start = now
		})
	}
	if !plant.On("floor-not-raised") {
		m.reserve()
	}
	m.replayed()
	return out
}

// Replaying says the engine is about to replay its log up to entry last
// (its last command when the node started): until the state machine has
// applied it, the process's GC policy is relaxed (memorypolicy.Relax),
// since the replay builds the whole table at once; then the memory grown
// meanwhile is returned (ReturnFreedMemory).
func (m *Machine) Replaying(last uint64) {
	m.replay.Store(&replay{to: last, release: memorypolicy.Relax()})
	m.replayed()
}

// EndReplay ends a replay that will not finish: the engine stops, or
// failed to start.
func (m *Machine) EndReplay() {
	if r := m.replay.Swap(nil); r != nil {
		r.release()
	}
}

func (m *Machine) replayed() {
	r := m.replay.Load()
	if r == nil || m.fsm.AppliedIndex() < r.to {
		return
	}
	if m.replay.CompareAndSwap(r, nil) {
		r.release()
		m.signal()
	}
}

// FloorErr is non-nil once this node could not record its token
// ceiling: from then on it must answer no grant (the tokens it applied
// may not be covered).
func (m *Machine) FloorErr() error {
	if m.floor == nil {
		return nil
	}
	if err := m.floor.err(); err != nil {
		return fmt.Errorf("%w: %v", errFloor, err)
	}
	return nil
}

func (m *Machine) signal() {
	select {
	case m.freed <- struct{}{}:
	default:
	}
}

// Restore replaces the state with the snapshot read from r.
func (m *Machine) Restore(r io.Reader) error {
	defer m.signal()
	err := m.fsm.Restore(r)
	m.reserve()
	m.replayed()
	if err == nil && m.hooks.Restored != nil {
		m.hooks.Restored()
	}
	return err
}

// Snapshot captures the state now; the engine writes it out later
// (WriteTo) and releases it when done.
func (m *Machine) Snapshot() *MachineSnapshot {
	return &MachineSnapshot{snap: m.fsm.Snapshot(), m: m}
}

// MachineSnapshot is a captured state on its way to disk or a peer.
type MachineSnapshot struct {
	snap *fsm.Snapshot
	m    *Machine
	n    int64 // bytes written
}

// WriteTo writes the snapshot to w.
func (s *MachineSnapshot) WriteTo(w io.Writer) (int64, error) {
	n, err := s.snap.WriteTo(w)
	s.n += n
	return n, err
}

// Release says the snapshot is no longer needed: a big one written asks
// for the memory it held to be returned.
func (s *MachineSnapshot) Release() {
	if s.n >= s.m.big {
		s.m.signal()
	}
}

// ReturnFreedMemory gives memory freed by restores and big snapshots
// back to the operating system, off the engine's path (an engine
// restores the last snapshot at startup before it serves, and the forced
// collection of a big table takes a noticeable part of a second), until
// stop is closed. The engine runs it on a goroutine of its own.
func (m *Machine) ReturnFreedMemory(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			m.EndReplay()
			return
		case <-m.freed:
			debug.FreeOSMemory()
		}
	}
}
