package service

import (
	"context"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/locktable"
)

// Overview answers a page of live leases whose keys start with prefix,
// each with the head of its wait queue, the last token issued and this
// node's lease counters and histograms (api.Overview). It is a read: the
// leader answers it at the current cluster time, like List; limit 0 is
// api.DefaultOverviewLimit.
func (s *Service) Overview(ctx context.Context, prefix string, limit int) (api.Overview, error) {
	if limit == 0 {
		limit = api.DefaultOverviewLimit
	}
	e := checkPrefix(prefix)
	if e == nil && (limit < 1 || limit > api.MaxOverviewLimit) {
		e = Invalid("limit", "limit must be an integer between 1 and %d", api.MaxOverviewLimit)
	}
	if e != nil {
		return api.Overview{}, s.fail(e)
	}
	now, e := s.readNow()
	if e != nil {
		return api.Overview{}, s.fail(e)
	}
	page := s.fsm.Overview(prefix, "", now, limit, api.MaxOverviewWaiters)
	out := api.Overview{
		Node:        s.cfg.NodeID,
		NowMs:       int64(now) / int64(locktable.Millisecond),
		LastToken:   page.LastToken,
		Locks:       make([]api.LockOverview, len(page.Locks)),
		More:        page.More,
		DelayedMore: page.DelayedMore,
		Queued:      page.Queued,
		Stats:       s.metrics.Stats(),
	}
	for _, d := range page.Delayed {
		dk := api.DelayedKey{Key: d.Key, RemainingMs: ms(locktable.Duration(d.Until - now)),
			Waiters: make([]api.Waiter, len(d.Waiters)), WaitersTotal: d.Queued}
		for j, w := range d.Waiters {
			dk.Waiters[j] = wireWaiter(w, locktable.Exclusive, now) // only exclusive locks take a lock-delay
		}
		out.Delayed = append(out.Delayed, dk)
	}
	for i, l := range page.Locks {
		lo := api.LockOverview{
			Lease:        wireLease(l.Lease, now),
			HeldMs:       ms(locktable.Duration(now - l.Lease.Granted)),
			Waiters:      make([]api.Waiter, len(l.Waiters)),
			WaitersTotal: l.Queued,
		}
		for j, w := range l.Waiters {
			lo.Waiters[j] = wireWaiter(w, l.Lease.Kind, now)
		}
		out.Locks[i] = lo
	}
	out.Sessions, out.SessionsOpen = s.overviewSessions(out.Locks, now)
	return out, nil
}

// overviewSessions marks each of locks with the session it is held under
// and answers those sessions (semaphores and read/write locks are never
// taken under one).
func (s *Service) overviewSessions(locks []api.LockOverview, now locktable.Time) ([]api.SessionOverview, int) {
	keys := make([]string, 0, len(locks))
	at := make([]int, 0, len(locks))
	for i, l := range locks {
		if l.Kind == "" {
			keys = append(keys, l.Key)
			at = append(at, i)
		}
	}
	ids, found, open := s.fsm.SessionsOf(keys, now, api.MaxOverviewSessions, api.MaxOverviewSessionKeys)
	for j, id := range ids {
		locks[at[j]].Session = id
	}
	out := make([]api.SessionOverview, len(found))
	for i, f := range found {
		ss := f.Session
		out[i] = api.SessionOverview{
			Session: api.Session{ID: ss.ID, Holder: ss.Holder, TTLMs: ms(ss.TTL),
				RemainingMs: ms(locktable.Duration(max(0, ss.Expiry-now))), Locks: ss.Locks, Waiting: ss.Waiting},
			Keys: f.Keys,
		}
	}
	return out, open
}
