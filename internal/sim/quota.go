package sim

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
	"github.com/fencelock/fencelock/internal/service"
	"github.com/fencelock/fencelock/internal/sim/simcheck"
)

// Quotas in the world (Config.Quotas, half of the worlds with ACLs): the
// nodes run with small per-principal quotas of sessions, leases and
// queue places, and watches, so that the actors, the prober and the
// watcher run into them now and then. The leader counts a principal's
// sessions, leases and queue places from the table it has applied plus
// its own proposals in flight (service/quota.go); each node counts the
// watches open on it. The checks:
//
//   - no committed entry leaves a principal past a quota, by the
//     auditor's account of the committed log (simcheck.CountOwners);
//   - a call refused quota_exceeded for sessions, leases or queue places
//     was refused when its principal was at the quota by the committed
//     log's account: at some entry from the one the node had applied when
//     the call reached it to the one it had applied when it answered,
//     the principal had enough that the call's ask would pass the quota.
//     A call that overlapped another call of its principal on that node
//     (which may have held a reservation) is not judged;
//   - a watch refused quota_exceeded overlapped at least the quota of its
//     principal's other watches served by that node.
//
// Overlaps are judged on the calls' instants of virtual time, ends
// included, once the world is over: never on the order in which the
// scheduler ran two goroutines of one instant, so that the count of
// calls judged is the seed's.

// quotaLimits are the quotas one world draws.
type quotaLimits struct {
	sessions, locks, waiters, watches int
}

// quotaBook is the world's record of the calls the quotas are judged on.
type quotaBook struct {
	lim      quotaLimits
	mu       sync.Mutex
	spans    map[string][]*quotaCall // node|incarnation|principal -> every call served there
	refusals []quotaRefusal
	kinds    map[string]int // refusals by quota
}

// quotaCall is one call served: from when it reached the node to its
// answer, on virtual time (an instant of the world's, not the order the
// scheduler ran two goroutines of one instant in).
type quotaCall struct {
	path       string
	start, end time.Time // end zero: still served
	lo         uint64    // the node's applied index when the call reached it
}

type quotaRefusal struct {
	key       string
	call      *quotaCall
	principal string
	kind      string
	hi        uint64
}

// setQuotas draws the world's quotas and gives them to its nodes.
func (w *world) setQuotas() {
	r := w.draw("quotas", 0)
	pick := func(xs ...int) int { return xs[r.IntN(len(xs))] }
	lim := quotaLimits{sessions: pick(1, 2), locks: pick(2, 3, 4), waiters: pick(1, 2), watches: pick(1, 2)}
	w.quota = &quotaBook{lim: lim, spans: map[string][]*quotaCall{}, kinds: map[string]int{}}
	c := &w.cl.scfg
	c.QuotaSessions, c.QuotaLocks, c.QuotaWaiters, c.WatchMaxPerCaller = lim.sessions, lim.locks, lim.waiters, lim.watches
	owners := make([]string, w.cfg.Clients+2)
	for i := range owners {
		owners[i] = principal(i)
	}
	w.hist.CountOwners(simcheck.Quotas{Sessions: lim.sessions, Locks: lim.locks, Waiters: lim.waiters, Owners: owners})
	w.tracef("w", "quotas: %d sessions, %d leases and queue places, %d queue places, %d watches a node for each principal",
		lim.sessions, lim.locks, lim.waiters, lim.watches)
}

// begin notes a call of principal p reaching node n (incarnation inc),
// whose service is svc.
func (q *quotaBook) begin(n *simNode, inc int, p, path string, svc *service.Service) (*quotaCall, string) {
	key := fmt.Sprintf("%s|%d|%s", n.id, inc, p)
	qc := &quotaCall{path: path, start: time.Now(), lo: svc.FSM().AppliedIndex()}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.spans[key] = append(q.spans[key], qc)
	return qc, key
}

// end notes the call's answer, a refusal by a quota among them.
func (q *quotaBook) end(w *world, qc *quotaCall, key, p string, svc *service.Service, code int, body []byte) {
	hi := svc.FSM().AppliedIndex()
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
	q.refusals = append(q.refusals, quotaRefusal{key: key, call: qc, principal: p, kind: e.Quota, hi: hi})
}

// overlaps counts the other calls served on r's node for its principal
// at some instant of r's (ends included), and of those the watches.
func (q *quotaBook) overlaps(r quotaRefusal) (others, watches int) {
	for _, o := range q.spans[r.key] {
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
// takes up to three keys in this world.
func askMost(path string) int {
	if path == api.PathAcquireAll {
		return 3
	}
	return 1
}

// judgeQuotas judges the refusals once the world is over, and traces
// how many there were.
func (w *world) judgeQuotas() {
	q := w.quota
	if q == nil {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	rs := q.refusals
	slices.SortFunc(rs, func(a, b quotaRefusal) int {
		return cmp.Or(a.call.start.Compare(b.call.start), a.call.end.Compare(b.call.end), strings.Compare(a.key, b.key),
			strings.Compare(a.call.path, b.call.path), strings.Compare(a.kind, b.kind), cmp.Compare(a.call.lo, b.call.lo), cmp.Compare(a.hi, b.hi))
	})
	judged := 0
	for _, r := range rs {
		bad := ""
		others, watches := q.overlaps(r)
		switch r.kind {
		case api.QuotaWatches:
			judged++
			if watches < q.lim.watches {
				bad = fmt.Sprintf("with %d other watches of its principal on the node, under its quota of %d", watches, q.lim.watches)
			}
		case api.QuotaSessions, api.QuotaLocks, api.QuotaWaiters:
			if others > 0 {
				continue
			}
			judged++
			most := w.hist.OwnerMost(r.principal, r.call.lo, r.hi)
			have, limit := most.Sessions, q.lim.sessions
			switch r.kind {
			case api.QuotaLocks:
				have, limit = most.Locks, q.lim.locks
			case api.QuotaWaiters:
				have, limit = most.Waits, q.lim.waiters
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
			w.violate("z", "quota: %s's %s at %s refused (quota %s) %s", r.principal, r.call.path, r.call.end.Sub(w.t0), r.kind, bad)
		}
	}
	kinds := make([]string, 0, len(q.kinds))
	for _, k := range slices.Sorted(maps.Keys(q.kinds)) {
		kinds = append(kinds, fmt.Sprintf("%s=%d", k, q.kinds[k]))
	}
	w.tracef("z", "quota: %d refusals (%s), %d judged", len(rs), strings.Join(kinds, " "), judged)
	w.mu.Lock()
	w.counts.Quota += len(rs)
	w.mu.Unlock()
}
