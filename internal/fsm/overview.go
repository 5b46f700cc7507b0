package fsm

import "github.com/fencelock/fencelock/internal/locktable"

// LockQueue is one live lease with the head of its wait queue.
type LockQueue struct {
	Lease   locktable.Lease
	Waiters []locktable.Queued // head first, at most the max asked for
	Queued  int                // waiters on the key in all
}

// OverviewPage is what a dashboard shows of the table, read at once.
type OverviewPage struct {
	// Locks are live leases with their queues; More: more leases follow.
	Locks []LockQueue
	More  bool
	// Delayed are the keys in their lock-delay with their queues;
	// DelayedMore: more were left out.
	Delayed     []DelayedQueue
	DelayedMore bool
	LastToken   uint64 // the last token issued
	Queued      int    // the waiters in all queues
}

// DelayedQueue is a key in its lock-delay until Until (no lease holds
// it), with the head of its wait queue.
type DelayedQueue struct {
	Key     string
	Until   locktable.Time
	Waiters []locktable.Queued // head first, at most the max asked for
	Queued  int                // waiters on the key in all
}

// Overview reads, under one lock, what a dashboard shows: up to limit live
// leases whose keys start with prefix (in key order, from the first key
// after after) with at most maxWaiters of each key's queue, whether more
// leases follow, up to limit keys under prefix in their lock-delay with
// their queues, the last token issued and the waiters in all queues. Its
// cost is that of ListAfter plus the waiters copied and the keys in a
// lock-delay looked at.
func (f *FSM) Overview(prefix, after string, now locktable.Time, limit, maxWaiters int) OverviewPage {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var p OverviewPage
	leases := f.table.ListAfter(prefix, after, now, limit+1)
	if len(leases) > limit {
		leases, p.More = leases[:limit], true
	}
	p.Locks = f.withQueues(leases, maxWaiters)
	delayed, more := f.table.DelayedKeys(prefix, now, limit)
	p.DelayedMore = more
	for _, d := range delayed {
		ws, n := f.table.QueueOf(d.Key, maxWaiters)
		p.Delayed = append(p.Delayed, DelayedQueue{Key: d.Key, Until: d.Until, Waiters: ws, Queued: n})
	}
	p.LastToken, p.Queued = f.table.LastToken(), f.table.QueuedCount()
	return p
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
