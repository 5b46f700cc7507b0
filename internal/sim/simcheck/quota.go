package simcheck

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/locktable"
)

// Quotas are the per-principal quotas a world's nodes run with (0: none;
// Watches: open on one node) and the principals whose counts the
// committed log is followed for. The counts are the auditor's state
// machine's, applying the committed log: what a principal's holders had
// in the table after each entry.
type Quotas struct {
	Sessions, Locks, Waiters, Watches int
	Owners                            []string
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

// QuotaBook is a world's record of the calls its nodes served, on which
// their refusals by a quota are judged (JudgeQuotas): a call refused
// quota_exceeded for sessions, leases or queue places must have been
// refused when its principal was at the quota by the committed log's
// account, at some entry from the one the node had applied when the call
// reached it to the one it had applied when it answered (a call that
// overlapped another of its principal's on that node, which may have
// held a reservation, is not judged); a watch refused quota_exceeded
// must have overlapped at least the quota of its principal's other
// watches on that node. Overlaps are judged on the calls' instants of
// virtual time, ends included, never on the order in which the
// scheduler ran two goroutines of one instant.
type QuotaBook struct {
	lim      Quotas
	mu       sync.Mutex
	spans    map[string][]*QuotaCall // node|incarnation|principal -> every call served there
	refusals []quotaRefusal
	kinds    map[string]int // refusals by quota
}

// QuotaCall is one call served: from when it reached the node to its
// answer, on virtual time.
type QuotaCall struct {
	key, principal string
	path           string
	start, end     time.Time // end zero: still served
	lo             uint64    // the node's applied index when the call reached it
}

type quotaRefusal struct {
	call *QuotaCall
	kind string
	hi   uint64
}

// NewQuotaBook is an empty book for the quotas lim.
func NewQuotaBook(lim Quotas) *QuotaBook {
	return &QuotaBook{lim: lim, spans: map[string][]*QuotaCall{}, kinds: map[string]int{}}
}

// Begin notes a call of principal p on path reaching incarnation inc of
// node, which had applied the entries up to applied.
func (q *QuotaBook) Begin(node string, inc int, p, path string, applied uint64) *QuotaCall {
	key := fmt.Sprintf("%s|%d|%s", node, inc, p)
	qc := &QuotaCall{key: key, principal: p, path: path, start: time.Now(), lo: applied}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.spans[key] = append(q.spans[key], qc)
	return qc
}

// End notes qc's answer (status code, body), the node having applied
// the entries up to applied: a refusal by a quota among them.
func (q *QuotaBook) End(qc *QuotaCall, applied uint64, code int, body []byte) {
	q.mu.Lock()
	defer q.mu.Unlock()
	qc.end = time.Now()
	if code != 429 {
		return
	}
	var e api.Error
	if json.Unmarshal(body, &e) != nil || e.Code != api.CodeQuotaExceeded {
		return
	}
	q.kinds[e.Quota]++
	q.refusals = append(q.refusals, quotaRefusal{call: qc, kind: e.Quota, hi: applied})
}

// overlaps counts the other calls served on r's node for its principal
// at some instant of r's (ends included), and of those the watches.
func (q *QuotaBook) overlaps(r quotaRefusal) (others, watches int) {
	for _, o := range q.spans[r.call.key] {
		if o == r.call || o.start.After(r.call.end) || !o.end.IsZero() && o.end.Before(r.call.start) {
			continue
		}
		others++
		if o.path == api.PathWatch {
			watches++
		}
	}
	return others, watches
}

// askMost is the most a call on path can ask of a count: an acquire-all
// takes up to three keys in a world.
func askMost(path string) int {
	if path == api.PathAcquireAll {
		return 3
	}
	return 1
}

// JudgeQuotas judges q's refusals once the world is over (after Finish),
// traces how many there were, and answers that count.
func (h *History) JudgeQuotas(q *QuotaBook) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	rs := q.refusals
	slices.SortFunc(rs, func(a, b quotaRefusal) int {
		return cmp.Or(a.call.start.Compare(b.call.start), a.call.end.Compare(b.call.end), strings.Compare(a.call.key, b.call.key),
			strings.Compare(a.call.path, b.call.path), strings.Compare(a.kind, b.kind), cmp.Compare(a.call.lo, b.call.lo), cmp.Compare(a.hi, b.hi))
	})
	judged := 0
	for _, r := range rs {
		bad := ""
		others, watches := q.overlaps(r)
		switch r.kind {
		case api.QuotaWatches:
			judged++
			if watches < q.lim.Watches {
				bad = fmt.Sprintf("with %d other watches of its principal on the node, under its quota of %d", watches, q.lim.Watches)
			}
		case api.QuotaSessions, api.QuotaLocks, api.QuotaWaiters:
			if others > 0 {
				continue
			}
			judged++
			most := h.OwnerMost(r.call.principal, r.call.lo, r.hi)
			have, limit := most.Sessions, q.lim.Sessions
			switch r.kind {
			case api.QuotaLocks:
				have, limit = most.Locks, q.lim.Locks
			case api.QuotaWaiters:
				have, limit = most.Waits, q.lim.Waiters
			}
			ask := askMost(r.call.path)
			if r.kind == api.QuotaSessions {
				ask = 1
			}
			if have+ask <= limit {
				bad = fmt.Sprintf("while the committed log gave its principal at most %d from entry %d to %d, so %d more was within its quota of %d",
					have, r.call.lo, r.hi, ask, limit)
			}
		}
		if bad != "" {
			h.r.Violate("z", "quota: %s's %s at %s refused (quota %s) %s", r.call.principal, r.call.path, r.call.end.Sub(h.t0), r.kind, bad)
		}
	}
	kinds := make([]string, 0, len(q.kinds))
	for _, k := range slices.Sorted(maps.Keys(q.kinds)) {
		kinds = append(kinds, fmt.Sprintf("%s=%d", k, q.kinds[k]))
	}
	h.r.Tracef("z", "quota: %d refusals (%s), %d judged", len(rs), strings.Join(kinds, " "), judged)
	return len(rs)
}
