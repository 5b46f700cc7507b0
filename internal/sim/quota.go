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
//   - a watch refused quota_exceeded was refused while at least the quota
//     of its principal's other watches were being served by that node.

// quotaLimits are the quotas one world draws.
type quotaLimits struct {
	sessions, locks, waiters, watches int
}

// quotaBook is the world's record of the calls the quotas are judged on.
type quotaBook struct {
	lim      quotaLimits
	mu       sync.Mutex
	active   map[string][]*quotaCall // node|incarnation|principal -> calls being served
	refusals []quotaRefusal
	kinds    map[string]int // refusals by quota
}

// quotaCall is one call being served.
type quotaCall struct {
	path   string
	lo     uint64 // the node's applied index when the call reached it
	others int    // other calls of the principal on that node at the start or since
	watchs int    // of which watches
}

type quotaRefusal struct {
	at        time.Duration
	principal string
	kind      string
	path      string
	lo, hi    uint64
	others    int
	watchs    int
}

// setQuotas draws the world's quotas and gives them to its nodes.
func (w *world) setQuotas() {
	r := w.draw("quotas", 0)
	pick := func(xs ...int) int { return xs[r.IntN(len(xs))] }
	lim := quotaLimits{sessions: pick(1, 2), locks: pick(2, 3, 4), waiters: pick(1, 2), watches: pick(1, 2)}
	w.quota = &quotaBook{lim: lim, active: map[string][]*quotaCall{}, kinds: map[string]int{}}
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
	qc := &quotaCall{path: path, lo: svc.FSM().AppliedIndex()}
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, o := range q.active[key] {
		o.others++
		qc.others++
		if path == api.PathWatch {
			o.watchs++
		}
		if o.path == api.PathWatch {
			qc.watchs++
		}
	}
	q.active[key] = append(q.active[key], qc)
	return qc, key
}

// end notes the call's answer, a refusal by a quota among them.
func (q *quotaBook) end(w *world, qc *quotaCall, key, p string, svc *service.Service, code int, body []byte) {
	hi := svc.FSM().AppliedIndex()
	q.mu.Lock()
	defer q.mu.Unlock()
	q.active[key] = slices.DeleteFunc(q.active[key], func(o *quotaCall) bool { return o == qc })
	if len(q.active[key]) == 0 {
		delete(q.active, key)
	}
	if code != 429 {
		return
	}
	var e api.Error
	if json.Unmarshal(body, &e) != nil || e.Code != api.CodeQuotaExceeded {
		return
	}
	q.kinds[e.Quota]++
	q.refusals = append(q.refusals, quotaRefusal{at: time.Since(w.t0), principal: p, kind: e.Quota, path: qc.path,
		lo: qc.lo, hi: hi, others: qc.others, watchs: qc.watchs})
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
		return cmp.Or(cmp.Compare(a.at, b.at), strings.Compare(a.principal, b.principal), strings.Compare(a.path, b.path),
			strings.Compare(a.kind, b.kind), cmp.Compare(a.others, b.others), cmp.Compare(a.lo, b.lo), cmp.Compare(a.hi, b.hi))
	})
	judged := 0
	for _, r := range rs {
		bad := ""
		switch r.kind {
		case api.QuotaWatches:
			judged++
			if r.watchs < q.lim.watches {
				bad = fmt.Sprintf("with %d other watches of its principal on the node, under its quota of %d", r.watchs, q.lim.watches)
			}
		case api.QuotaSessions, api.QuotaLocks, api.QuotaWaiters:
			if r.others > 0 {
				continue
			}
			judged++
			most := w.hist.OwnerMost(r.principal, r.lo, r.hi)
			have, limit := most.Sessions, q.lim.sessions
			switch r.kind {
			case api.QuotaLocks:
				have, limit = most.Locks, q.lim.locks
			case api.QuotaWaiters:
				have, limit = most.Waits, q.lim.waiters
			}
			ask := askMost(r.path)
			if r.kind == api.QuotaSessions {
				ask = 1
			}
			if have+ask <= limit {
				bad = fmt.Sprintf("while the committed log gave its principal at most %d from entry %d to %d, so %d more was within its quota of %d",
					have, r.lo, r.hi, ask, limit)
			}
		}
		if bad != "" {
			w.violate("z", "quota: %s's %s at %s refused (quota %s) %s", r.principal, r.path, r.at, r.kind, bad)
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
