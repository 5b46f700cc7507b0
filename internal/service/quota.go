package service

import (
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/locktable"
	"github.com/fencelock/fencelock/internal/plant"
)

// Quotas per principal. With ACLs on a holder belongs to the principal
// whose name it is or starts with ("bob", "bob/1"), so what a principal
// pins in the table is its holders' owner count (locktable.OwnerOf):
// open sessions, leases held and places in wait queues. The leader
// refuses, before it proposes, a call that would take a principal past a
// quota, counting what the table has (as applied) and what its own
// proposals in flight will add; so one principal, however many holder
// names it uses, cannot fill a table-wide cap and lock the others out.
// The operations that add to a count take the principal as an argument
// (the transport passes the one it authenticated); "" is a call without
// one (ACLs off, in-process callers): no quota. Watches are counted per
// caller on each node (eventlog).

// quotas are the leader's reservations: what its proposals in flight
// will add to each owner's count.
type quotas struct {
	mu      sync.Mutex
	pending map[string]*locktable.OwnerCount
}

// ask is what a call would add to its owner's count.
type ask struct {
	sessions, locks, waits int
}

// reserve refuses a call of principal p, acting as holder, that would
// take it past a quota, or holds room for it until release is called
// (once its proposal has applied, or failed). Without a principal it
// reserves nothing.
func (s *Service) reserve(p, holder string, a ask) (release func(), e *Error) {
	if p == "" || a == (ask{}) {
		return func() {}, nil
	}
	owner := locktable.OwnerOf(holder)
	q := &s.quotas
	q.mu.Lock()
	defer q.mu.Unlock()
	cur := s.fsm.Owner(owner)
	pend := q.pending[owner]
	if pend == nil {
		pend = &locktable.OwnerCount{}
	}
	over := func(kind string, limit, have, more int) *Error {
		if limit <= 0 || more <= 0 || have+more <= limit {
			return nil
		}
		s.metrics.QuotaRefused.WithLabelValues(kind).Inc()
		return &Error{Code: api.CodeQuotaExceeded, Quota: kind, Message: quotaMessage(p, kind, limit, have)}
	}
	inflight := *pend
	if plant.On("quota-in-flight-ignored") {
		inflight = locktable.OwnerCount{} // planted: only what the table has applied counts
	}
	if e := firstErr(
		over(api.QuotaSessions, s.cfg.QuotaSessions, cur.Sessions+inflight.Sessions, a.sessions),
		over(api.QuotaWaiters, s.cfg.QuotaWaiters, cur.Waits+inflight.Waits, a.waits),
		over(api.QuotaLocks, s.cfg.QuotaLocks, cur.Locks+cur.Waits+inflight.Locks+inflight.Waits, a.locks+a.waits),
	); e != nil {
		return nil, e
	}
	pend.Sessions += a.sessions
	pend.Locks += a.locks
	pend.Waits += a.waits
	if q.pending == nil {
		q.pending = map[string]*locktable.OwnerCount{}
	}
	q.pending[owner] = pend
	var once sync.Once
	return func() {
		once.Do(func() {
			q.mu.Lock()
			defer q.mu.Unlock()
			pend.Sessions -= a.sessions
			pend.Locks -= a.locks
			pend.Waits -= a.waits
			if *pend == (locktable.OwnerCount{}) {
				delete(q.pending, owner)
			}
		})
	}, nil
}

// quotaWords say what each quota counts and which server flag sets it.
var quotaWords = map[string]struct{ what, flag string }{
	api.QuotaSessions: {"open sessions", "--max-sessions-per-principal"},
	api.QuotaLocks:    {"leases held and places in wait queues", "--max-locks-per-principal"},
	api.QuotaWaiters:  {"places in wait queues", "--max-waiters-per-principal"},
	// Counted by the table, from the limit in the wait command.
	api.QuotaKeyWaiters: {"places in this key's wait queue", "--max-waiters-per-key-per-principal"},
}

func quotaMessage(p, kind string, limit, have int) string {
	w := quotaWords[kind]
	return fmt.Sprintf("quota %s: principal %q has %d %s, its quota of %d (server %s); nothing changed", kind, p, have, w.what, limit, w.flag)
}

// joinWatch counts one more watch of caller, or refuses it past a limit
// (a caller's is its quota of watches).
func (s *Service) joinWatch(caller string) *Error {
	err := s.watches.Join(caller)
	if err == nil {
		return nil
	}
	e := watchError(err)
	if e.Quota != "" {
		s.metrics.QuotaRefused.WithLabelValues(e.Quota).Inc()
	}
	return e
}

// grantAsk is what a grant would add: nothing if the holder has the key
// or a place in its queue already; a queue place for a wait on a key
// someone else has; else a lease.
func (s *Service) grantAsk(g grant) ask {
	if s.fsm.Counted(g.key, g.holder) {
		return ask{}
	}
	if g.wait > 0 && s.taken(g.key) {
		return ask{waits: 1}
	}
	return ask{locks: 1}
}

// taken reports whether key has a live lease or a queue now.
func (s *Service) taken(key string) bool {
	now, ok := s.clock.now()
	if !ok {
		now = s.fsm.Now()
	}
	if _, held := s.fsm.Get(key, now); held {
		return true
	}
	if len(s.fsm.Holders(key, now)) > 0 {
		return true
	}
	return len(s.fsm.Waiters(key)) > 0
}

// quotaCollectors are the quotas' limits, for the metrics.
func quotaCollectors(cfg Config) []prometheus.Collector {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "fencelock_quota_limit", Help: "Each quota of one principal (0: none): sessions, locks (leases held plus queue places), waiters (queue places), watches (open on one node), key_waiters (places in one key's queue).",
	}, []string{"quota"})
	g.WithLabelValues(api.QuotaSessions).Set(float64(cfg.QuotaSessions))
	g.WithLabelValues(api.QuotaLocks).Set(float64(cfg.QuotaLocks))
	g.WithLabelValues(api.QuotaWaiters).Set(float64(cfg.QuotaWaiters))
	g.WithLabelValues(api.QuotaWatches).Set(float64(cfg.WatchMaxPerCaller))
	g.WithLabelValues(api.QuotaKeyWaiters).Set(float64(cfg.QuotaKeyWaiters))
	return []prometheus.Collector{g}
}
