package fsm

import "github.com/fencelock/fencelock/internal/locktable"

// LockQueue is one live lease with the head of its wait queue.
type LockQueue struct {
	Lease   locktable.Lease
	Waiters []locktable.Queued // head first, at most the max asked for
	Queued  int                // waiters on the key in all
}

// Overview reads, under one lock, what a dashboard shows: up to limit live
// leases whose keys start with prefix (in key order, from the first key
// after after) with at most maxWaiters of each one's queue, whether more
// leases follow, the last token issued and the waiters in all queues. Its
// cost is that of ListAfter plus the waiters copied.
func (f *FSM) Overview(prefix, after string, now locktable.Time, limit, maxWaiters int) (locks []LockQueue, more bool, lastToken uint64, queued int) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	leases := f.table.ListAfter(prefix, after, now, limit+1)
	if len(leases) > limit {
		leases, more = leases[:limit], true
	}
	locks = make([]LockQueue, len(leases))
	for i, l := range leases {
		ws, n := f.table.QueueOf(l.Key, maxWaiters)
		locks[i] = LockQueue{Lease: l, Waiters: ws, Queued: n}
	}
	return locks, more, f.table.LastToken(), f.table.QueuedCount()
}
