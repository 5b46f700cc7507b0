package simcheck

import (
	"slices"
	"time"
)

// Loss is a lease (or session) its holder found lost while it still
// meant to hold it.
type Loss struct {
	Grant *Grant
	TTL   time.Duration
	At    time.Time // when the holder noticed (within TTL/5 of the loss)
	Err   string
}

// Fault is one fault a world injected, for judging lost leases: on the
// node that led when it began (Leader), or on one client process.
type Fault struct {
	Start, End time.Time // End: zero while it lasts
	Leader     bool
	Client     int // -1: a node's fault
}

// Interval is a span of virtual time; End zero: not over.
type Interval struct{ Start, End time.Time }

// failoverFits is the shortest TTL whose keep-alive keeps room for one
// failover between an extension's due time and giving up (client's
// failoverAllowance: from a TTL of 2 s up).
const failoverFits = 2 * time.Second

// JudgeLosses checks that a held lease was lost only for a cause the
// design allows, within a TTL (and the holder's noticing) before: a fault
// of the holder's own process or network (paused, cut from a node, on a
// lossy link), more than one failover (a leader's fault, an election), one
// beside another node's fault (a call that reached a frozen follower
// waits up to two health checks, the client's waitCheck, before it moves
// on), or, under a TTL too short to keep room for a failover, any one. A
// lease lost in a TTL where none of these happened is a violation: the
// keep-alive gave up with a majority and a leader within its reach. The
// world hands the faults it injected, when each leader was elected, and
// when no majority of its nodes worked together (outages).
func (h *History) JudgeLosses(losses []Loss, faults []Fault, elected []time.Time, outages []Interval) {
	for _, l := range losses {
		from := l.At.Add(-l.TTL - l.TTL/5)
		if slices.ContainsFunc(outages, func(o Interval) bool {
			return !o.Start.After(l.At) && (o.End.IsZero() || !o.End.Before(from))
		}) {
			continue // no majority worked together: nothing keeps a lease then
		}
		own, leaders, others := false, 0, 0
		for _, f := range faults {
			if !f.End.IsZero() && f.End.Before(from) || f.Start.After(l.At) {
				continue
			}
			switch {
			case f.Client == l.Grant.Client:
				own = true
			case f.Leader:
				leaders++
			case f.Client < 0:
				others++ // a node that did not lead: it may hold a call for up to two health checks
			}
		}
		// An election is a leader's change too (the first one, at the
		// start, included): count the failovers as the more of the two.
		elections := 0
		for _, e := range elected {
			if !e.Before(from) && !e.After(l.At) {
				elections++
			}
		}
		leaders = max(leaders, elections)
		if own || leaders > 1 || (leaders == 1 && (others > 0 || l.TTL < failoverFits)) {
			continue
		}
		h.r.Violate("z", "%s lost %s %s token %d (ttl %s) at %s with %d leader faults and none of its own within a TTL before: %s",
			l.Grant.Holder, l.Grant.Kind, l.Grant.Key, l.Grant.Token, l.TTL, l.At.Sub(h.t0), leaders, l.Err)
	}
}
