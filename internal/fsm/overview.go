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
// after after) with at most maxWaiters of each key's queue, whether more
// leases follow, the last token issued and the waiters in all queues. Its
// cost is that of ListAfter plus the waiters copied.
func (f *FSM) Overview(prefix, after string, now locktable.Time, limit, maxWaiters int) (locks []LockQueue, more bool, lastToken uint64, queued int) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	leases := f.table.ListAfter(prefix, after, now, limit+1)
	if len(leases) > limit {
		leases, more = leases[:limit], true
	}
	return f.withQueues(leases, maxWaiters), more, f.table.LastToken(), f.table.QueuedCount()
}

// ListQueues is ListAfter with at most maxWaiters of each key's queue, read
// under the same lock.
func (f *FSM) ListQueues(prefix, after string, now locktable.Time, limit, maxWaiters int) []LockQueue {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.withQueues(f.table.ListAfter(prefix, after, now, limit), maxWaiters)
}

// QueueOf is at most max of key's waiters, head first, and how many wait
// on key in all.
func (f *FSM) QueueOf(key string, max int) ([]locktable.Queued, int) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.table.QueueOf(key, max)
}

// withQueues pairs leases (in key order) with their keys' queues. A key
// of several holders has its queue given with its first lease only, so
// that every waiter is counted once.
func (f *FSM) withQueues(leases []locktable.Lease, maxWaiters int) []LockQueue {
	out := make([]LockQueue, len(leases))
	for i, l := range leases {
		out[i].Lease = l
		if i > 0 && leases[i-1].Key == l.Key {
			continue
		}
		out[i].Waiters, out[i].Queued = f.table.QueueOf(l.Key, maxWaiters)
	}
	return out
}
