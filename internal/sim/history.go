package sim

import (
	"slices"
	"time"

	"github.com/fencelock/fencelock/internal/node/etcd"
	"github.com/fencelock/fencelock/internal/sim/simcheck"
)

// What the world judges itself of its history, knowing how it runs: the
// voters of a configuration, and whether a lease its holder lost was lost
// for a cause the design allows (the rest of the checks are simcheck's).

// votersAt are the voters the committed log's configuration changes
// leave as of index (the world's nodes to start with), then the changes
// more, after index, in log order (committed, not yet applied anywhere).
func (c *cluster) votersAt(index uint64, more ...etcd.Entry) []*simNode {
	in := map[*simNode]bool{}
	for _, n := range c.nodes[:c.initial] {
		in[n] = true
	}
	for _, e := range c.w.hist.Confs(index, more...) {
		n := c.byID[e.Member]
		switch {
		case n == nil:
		case e.Remove || e.Learner:
			delete(in, n)
		default:
			in[n] = true
		}
	}
	var out []*simNode
	for _, n := range c.nodes {
		if in[n] {
			out = append(out, n)
		}
	}
	return out
}

// lostLease is a lease (or session) its holder found lost while it still
// meant to hold it.
type lostLease struct {
	rec *simcheck.Grant
	ttl time.Duration
	at  time.Time // when the holder noticed (within ttl/5 of the loss)
	err string
}

func (w *world) lost(l lostLease) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.losses = append(w.losses, l)
}

// failoverFits is the shortest TTL whose keep-alive keeps room for one
// failover between an extension's due time and giving up (client's
// failoverAllowance: from a TTL of 2 s up).
const failoverFits = 2 * time.Second

// judgeLosses checks that a held lease was lost only for a cause the
// design allows, within a TTL (and the holder's noticing) before: a fault
// of the holder's own process or network (paused, cut from a node, on a
// lossy link), more than one failover (a leader's fault, an election), one
// beside another node's fault (a call that reached a frozen follower
// waits up to two health checks, the client's waitCheck, before it moves
// on), or, under a TTL too short to keep room for a failover, any one. A lease lost in a
// TTL where none of these happened is a violation: the keep-alive gave up
// with a majority and a leader within its reach.
func (w *world) judgeLosses() {
	w.mu.Lock()
	losses := append([]lostLease(nil), w.losses...)
	faults := append([]fault(nil), w.faults...)
	elected := append([]time.Time(nil), w.elected...)
	outages := append([]interval(nil), w.outages...)
	w.mu.Unlock()
	for _, l := range losses {
		from := l.at.Add(-l.ttl - l.ttl/5)
		if slices.ContainsFunc(outages, func(o interval) bool {
			return !o.start.After(l.at) && (o.end.IsZero() || !o.end.Before(from))
		}) {
			continue // no majority worked together: nothing keeps a lease then
		}
		own, leaders, others := false, 0, 0
		for _, f := range faults {
			if !f.end.IsZero() && f.end.Before(from) || f.start.After(l.at) {
				continue
			}
			switch {
			case f.client == l.rec.Client:
				own = true
			case f.leader:
				leaders++
			case f.client < 0:
				others++ // a node that did not lead: it may hold a call for up to two health checks
			}
		}
		// An election is a leader's change too (the first one, at the
		// start, included): count the failovers as the more of the two.
		elections := 0
		for _, e := range elected {
			if !e.Before(from) && !e.After(l.at) {
				elections++
			}
		}
		leaders = max(leaders, elections)
		if own || leaders > 1 || (leaders == 1 && (others > 0 || l.ttl < failoverFits)) {
			continue
		}
		w.violate("z", "%s lost %s %s token %d (ttl %s) at %s with %d leader faults and none of its own within a TTL before: %s",
			l.rec.Holder, l.rec.Kind, l.rec.Key, l.rec.Token, l.ttl, l.at.Sub(w.t0), leaders, l.err)
	}
}
