package node

import "sync"

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
