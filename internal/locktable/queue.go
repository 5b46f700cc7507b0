package locktable

import (
	"maps"
	"slices"
	"sort"
)

// Queued is one waiter as reported by QueuedWaiters.
type Queued struct {
	Key      string
	Holder   string
	Since    Time   // when it joined the queue
	Deadline Time   // it leaves the queue at now >= Deadline
	Write    bool   // a read/write lock's waiter that asks to write
	Session  uint64 // the session it is to be granted under (0: none)
}

// QueuedWaiters returns every waiter in every queue, keys sorted, each queue
// head first. A replicated server uses it after a restart or a leader change
// to find waiters whose callers are gone (their connections ended with the
// old process) so it can cancel them before anyone grants them a lease.
func (t *Table) QueuedWaiters() []Queued {
	var out []Queued
	for _, k := range slices.Sorted(maps.Keys(t.waiting)) {
		for _, w := range t.waiting[k].waiters {
			out = append(out, Queued{Key: k, Holder: w.holder, Since: w.since, Deadline: w.deadline})
		}
	}
	if len(t.multi) > 0 {
		out = t.queuedShared(out)
		sort.SliceStable(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	}
	return out
}
