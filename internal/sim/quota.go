package sim

import "github.com/fencelock/fencelock/internal/sim/simcheck"

// Quotas in the world (Config.Quotas, half of the worlds with ACLs): the
// nodes run with small per-principal quotas of sessions, leases and
// queue places, and watches, so that the actors, the prober and the
// watcher run into them now and then. The leader counts a principal's
// sessions, leases and queue places from the table it has applied plus
// its own proposals in flight (service/quota.go); each node counts the
// watches open on it. The checks (simcheck): no committed entry leaves a
// principal past a quota, by the auditor's account of the committed log
// (History.CountOwners); and each refusal by a quota was one the node
// could have made, judged once the world is over on the calls the world
// books as its network carries them (QuotaBook).

// setQuotas draws the world's quotas and gives them to its nodes.
func (w *world) setQuotas() {
	r := w.draw("quotas", 0)
	pick := func(xs ...int) int { return xs[r.IntN(len(xs))] }
	lim := simcheck.Quotas{Sessions: pick(1, 2), Locks: pick(2, 3, 4), Waiters: pick(1, 2), Watches: pick(1, 2)}
	w.quota = simcheck.NewQuotaBook(lim)
	c := &w.cl.scfg
	c.QuotaSessions, c.QuotaLocks, c.QuotaWaiters, c.WatchMaxPerCaller = lim.Sessions, lim.Locks, lim.Waiters, lim.Watches
	lim.Owners = make([]string, w.cfg.Clients+2)
	for i := range lim.Owners {
		lim.Owners[i] = principal(i)
	}
	w.hist.CountOwners(lim)
	w.tracef("w", "quotas: %d sessions, %d leases and queue places, %d queue places, %d watches a node for each principal",
		lim.Sessions, lim.Locks, lim.Waiters, lim.Watches)
}

// judgeQuotas judges the refusals once the world is over, and counts
// them.
func (w *world) judgeQuotas() {
	if w.quota == nil {
		return
	}
	n := w.hist.JudgeQuotas(w.quota)
	w.mu.Lock()
	w.counts.Quota += n
	w.mu.Unlock()
}
