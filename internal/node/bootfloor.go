package node

import (
	"fmt"
	"sync"

	"github.com/hashicorp/raft"
)

// bootFloor records Config.TokenFloor as the floor the next leader
// commits before it serves a grant (the one `fencelock recover` leaves),
// when this node has no raft state yet: a new cluster, or a cluster
// rebuilt from scratch, starts above every token the old one issued. A
// node that already has state ignores it, so the flag can stay on a
// command line across restarts without moving anything.
func (n *Node) bootFloor(logs raft.LogStore, stable raft.StableStore, snaps raft.SnapshotStore) error {
	return n.floors.boot(n.cfg.TokenFloor, func() (bool, error) { return raft.HasExistingState(logs, stable, snaps) })
}

// boot records floor as the pending floor unless hasState (the engine's
// own test of whether it has raft state) says there is state already.
func (n *floors) boot(floor uint64, hasState func() (bool, error)) error {
	if floor == 0 {
		return nil
	}
	if floor > MaxFloor {
		return fmt.Errorf("server: a token floor of %d is above %d: tokens would run out", floor, uint64(MaxFloor))
	}
	has, err := hasState()
	if err != nil {
		return fmt.Errorf("server: reading raft state: %w", err)
	}
	if has {
		return nil
	}
	if n.state == nil {
		n.mem.set(floor)
		return nil
	}
	if err := n.state.update(func(st *dirState) { st.PendingFloor = max(st.PendingFloor, floor) }, true); err != nil {
		return fmt.Errorf("server: recording the token floor: %w", err)
	}
	return nil
}

// memFloor is the pending floor of a node without a data dir.
type memFloor struct {
	mu      sync.Mutex
	pending uint64
}

func (m *memFloor) set(f uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.pending = max(m.pending, f)
}

func (m *memFloor) get() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.pending
}

func (m *memFloor) clear(f uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.pending == f {
		m.pending = 0
	}
}
