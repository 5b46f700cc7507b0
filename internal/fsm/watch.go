package fsm

import "github.com/fencelock/fencelock/internal/locktable"

// ListAt is ListAfter together with the index of the last entry applied,
// read under one lock: the leases are the state after that entry and
// before the next, so a watch that starts after it misses nothing and
// repeats nothing of what the list shows. now is given as ListAfter's; a
// negative now is the last applied cluster time (a follower's reading).
func (f *FSM) ListAt(prefix, after string, now locktable.Time, limit int) ([]locktable.Lease, uint64, locktable.Time) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if now < 0 {
		now = f.now
	}
	return f.table.ListAfter(prefix, after, now, limit), f.index, now
}
