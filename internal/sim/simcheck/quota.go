package simcheck

import (
	"github.com/fencelock/fencelock/internal/locktable"
)

// Quotas are the per-principal quotas a world's nodes run with (0: none)
// and the principals whose counts the committed log is followed for.
// The counts are the auditor's state machine's, applying the committed
// log: what a principal's holders had in the table after each entry.
type Quotas struct {
	Sessions, Locks, Waiters int
	Owners                   []string
}

// ownerAt is one owner's count from a committed index on.
type ownerAt struct {
	index uint64
	c     locktable.OwnerCount
}

// CountOwners follows the owners of q through the committed log from
// the next entry applied on, and holds the log to q's quotas: no entry
// leaves a principal past a quota. It must be called before any entry
// is applied.
func (h *History) CountOwners(q Quotas) {
	h.amu.Lock()
	defer h.amu.Unlock()
	h.quotas = &q
	h.owners = map[string][]ownerAt{}
	for _, o := range q.Owners {
		h.owners[o] = []ownerAt{{}}
	}
}

// countOwners notes the owners' counts after the entry at index (under amu).
func (h *History) countOwners(index uint64) {
	q := h.quotas
	if q == nil {
		return
	}
	for _, o := range q.Owners {
		c := h.f.Owner(o)
		at := h.owners[o]
		if at[len(at)-1].c == c {
			continue
		}
		h.owners[o] = append(at, ownerAt{index: index, c: c})
		over := func(what string, have, limit int) {
			if limit > 0 && have > limit {
				h.r.Violate("w", "quota: entry %d leaves principal %s with %d %s, past its quota of %d", index, o, have, what, limit)
			}
		}
		over("open sessions", c.Sessions, q.Sessions)
		over("leases and queue places", c.Locks+c.Waits, q.Locks)
		over("queue places", c.Waits, q.Waiters)
	}
}

// OwnerMost is the most owner o had of each count (Locks: leases and
// queue places together) after any committed entry from lo to hi: what
// a node that had applied somewhere from lo to hi could have counted.
func (h *History) OwnerMost(o string, lo, hi uint64) (most locktable.OwnerCount) {
	h.amu.Lock()
	defer h.amu.Unlock()
	at := h.owners[o]
	for i, a := range at {
		if a.index > hi {
			break
		}
		if i+1 < len(at) && at[i+1].index <= lo {
			continue // replaced before lo
		}
		most.Sessions = max(most.Sessions, a.c.Sessions)
		most.Locks = max(most.Locks, a.c.Locks+a.c.Waits)
		most.Waits = max(most.Waits, a.c.Waits)
	}
	return most
}
