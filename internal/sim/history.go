package sim

import (
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/locktable"
	"github.com/fencelock/fencelock/internal/node/etcd"
)

// grantRec is one grant a client was answered, and how long its holder
// acted under it (virtual time).
type grantRec struct {
	client  int
	kind    string // lock, sem, read, write
	key     string
	holder  string
	token   uint64
	permits int
	ack     time.Time // the answer arrived
	last    time.Time // the last instant the holder acted under it
	acted   bool      // it acted at all (from ack to last)
}

// history checks the world: the committed log as the nodes applied it
// (the same entry at each index on every node), and as an auditor's own
// state machine applies it (tokens rising, no waiter skipped), and what
// the clients believed (no two exclusive holders acting at one instant,
// no more than the permits, no writer beside a reader, every
// acknowledged grant committed).
type history struct {
	w   *world
	f   *fsm.FSM
	mu  sync.Mutex
	all []*grantRec
	// leases their holders found lost, judged at the end (judgeLosses)
	losses []lostLease

	// The auditor's, under amu (the loop writes, the watcher reads).
	amu       sync.Mutex
	log       []auditEntry // the committed log, index i+1
	lastToken map[string]uint64
	queue     map[string][]string // exclusive keys: the waiters, head first
	committed map[string]bool     // key|holder|token of every committed grant
	events    []api.WatchEvent    // every event, as a watch must tell it
	confs     []etcd.Entry        // the configuration changes, in log order
	ledger    *ledger             // the audit by a model of its own
}

// auditEntry is one committed entry as the first node to apply it did.
type auditEntry struct {
	term uint64
	sum  uint64 // FNV-64a of its command (0: none)
	by   string // the node that applied it first
}

func newHistory(w *world) *history {
	h := &history{w: w, lastToken: map[string]uint64{},
		queue: map[string][]string{}, committed: map[string]bool{}}
	h.f = fsm.New(h.observe)
	h.ledger = newLedger(h)
	return h
}

// applied is told what node n's incarnation inc applied: a snapshot up
// to restored first, then ents. Each index must hold the same entry on
// every node; the first to apply an index adds it to the committed log,
// which the auditor applies.
func (h *history) applied(n *simNode, inc int, restored uint64, ents []etcd.Entry) {
	h.amu.Lock()
	defer h.amu.Unlock()
	if restored > uint64(len(h.log)) {
		h.w.violate("w", "%s restored a snapshot at %d, beyond the %d entries any node applied", n.id, restored, len(h.log))
	}
	for _, e := range ents {
		var sum uint64
		if e.Data != nil {
			x := fnv.New64a()
			x.Write(e.Data)
			sum = x.Sum64()
		}
		switch have := uint64(len(h.log)); {
		case e.Index <= have:
			if a := h.log[e.Index-1]; a.term != e.Term || a.sum != sum {
				h.w.violate("w", "%s (incarnation %d) applied entry %d of term %d, where %s applied one of term %d (commands %x, %x)",
					n.id, inc, e.Index, e.Term, a.by, a.term, sum, a.sum)
			}
		case e.Index == have+1:
			h.log = append(h.log, auditEntry{term: e.Term, sum: sum, by: n.id})
			if e.Data != nil {
				cmd, err := fsm.Decode(e.Data)
				if err != nil {
					h.w.violate("w", "entry %d does not decode: %v", e.Index, err)
					continue
				}
				h.ledger.begin(e.Index, cmd)
				h.ledger.end(h.f.Apply(e.Index, e.Term, e.Data))
			}
			if e.Conf && e.Member != 0 {
				h.confs = append(h.confs, e)
			}
		default:
			h.w.violate("w", "%s applied entry %d, after only %d entries any node applied", n.id, e.Index, have)
		}
	}
}

// votersAt are the voters the committed log's configuration changes
// leave as of index (the world's nodes to start with), then the changes
// more, after index, in log order (committed, not yet applied anywhere).
func (h *history) votersAt(index uint64, more ...etcd.Entry) []*simNode {
	h.amu.Lock()
	defer h.amu.Unlock()
	c := h.w.cl
	in := map[*simNode]bool{}
	for _, n := range c.nodes[:c.initial] {
		in[n] = true
	}
	var confs []etcd.Entry
	for _, e := range h.confs {
		if e.Index <= index {
			confs = append(confs, e)
		}
	}
	for _, e := range more {
		if e.Index > index && e.Conf && e.Member != 0 {
			confs = append(confs, e)
		}
	}
	for _, e := range confs {
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

func grantKey(key, holder string, token uint64) string {
	return fmt.Sprintf("%s|%s|%d", key, holder, token)
}

func (h *history) observe(index uint64, ev locktable.Event) {
	if h.w.verbose {
		h.w.tracef("w", "log %d: %s %s %s token %d at %s since %s expiry %s", index, ev.Kind, ev.Key, ev.Holder, ev.Token,
			time.Duration(ev.At), time.Duration(ev.Since), time.Duration(ev.Expiry))
	}
	h.expect(index, ev)
	h.ledger.event(ev)
	exclusive := strings.HasPrefix(ev.Key, "lock/")
	switch ev.Kind {
	case locktable.EventGranted:
		if ev.Token <= h.lastToken[ev.Key] {
			h.w.violate("w", "entry %d: %s granted %s token %d, not above the key's last token %d", index, ev.Holder, ev.Key, ev.Token, h.lastToken[ev.Key])
		}
		h.lastToken[ev.Key] = max(h.lastToken[ev.Key], ev.Token)
		h.committed[grantKey(ev.Key, ev.Holder, ev.Token)] = true
		if !exclusive {
			return
		}
		q := h.queue[ev.Key]
		if i := slices.Index(q, ev.Holder); i >= 0 {
			if i > 0 {
				h.w.violate("w", "entry %d: %s granted %s from the queue ahead of %s", index, ev.Holder, ev.Key, strings.Join(q[:i], ", "))
			}
			h.queue[ev.Key] = slices.Delete(q, i, i+1)
		}
	case locktable.EventWaitJoined:
		if exclusive {
			h.queue[ev.Key] = append(h.queue[ev.Key], ev.Holder)
		}
	case locktable.EventWaitLeft, locktable.EventWaitDropped:
		if q := h.queue[ev.Key]; exclusive {
			if i := slices.Index(q, ev.Holder); i >= 0 {
				h.queue[ev.Key] = slices.Delete(q, i, i+1)
			}
		}
	}
}

// lostLease is a lease (or session) its holder found lost while it still
// meant to hold it.
type lostLease struct {
	rec *grantRec
	ttl time.Duration
	at  time.Time // when the holder noticed (within ttl/5 of the loss)
	err string
}

func (h *history) lost(l lostLease) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.losses = append(h.losses, l)
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
func (h *history) judgeLosses() {
	h.mu.Lock()
	losses := append([]lostLease(nil), h.losses...)
	h.mu.Unlock()
	h.w.mu.Lock()
	faults := append([]fault(nil), h.w.faults...)
	elected := append([]time.Time(nil), h.w.elected...)
	outages := append([]interval(nil), h.w.outages...)
	h.w.mu.Unlock()
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
			case f.client == l.rec.client:
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
		h.w.violate("z", "%s lost %s %s token %d (ttl %s) at %s with %d leader faults and none of its own within a TTL before: %s",
			l.rec.holder, l.rec.kind, l.rec.key, l.rec.token, l.ttl, l.at.Sub(h.w.t0), leaders, l.err)
	}
}

func (h *history) granted(r *grantRec) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.all = append(h.all, r)
}

func (h *history) worked(r *grantRec) {
	h.mu.Lock()
	defer h.mu.Unlock()
	r.last, r.acted = time.Now(), true
}

func (h *history) acked() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.all)
}

// finish runs the checks over what the clients believed.
func (h *history) finish() {
	h.judgeLosses()
	h.mu.Lock()
	all := append([]*grantRec(nil), h.all...)
	h.mu.Unlock()
	h.amu.Lock()
	for _, r := range all {
		if !h.committed[grantKey(r.key, r.holder, r.token)] {
			h.w.violate("z", "%s was answered %s token %d, which the committed log never granted", r.holder, r.key, r.token)
		}
	}
	h.amu.Unlock()
	byKey := map[string][]*grantRec{}
	for _, r := range all {
		if r.acted {
			byKey[r.key] = append(byKey[r.key], r)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(byKey)) {
		rs := byKey[k]
		slices.SortFunc(rs, func(a, b *grantRec) int { return a.ack.Compare(b.ack) })
		if rs[0].kind == "sem" {
			h.permits(k, rs)
			continue
		}
		for i, a := range rs {
			for _, b := range rs[i+1:] {
				if b.ack.After(a.last) {
					break
				}
				// b began acting while a still did.
				switch {
				case a.kind == "read" && b.kind == "read":
				default:
					if a.token != b.token {
						h.w.violate("z", "%s: %s (%s token %d) acted until %s, after %s (%s token %d) was granted at %s",
							k, a.holder, a.kind, a.token, a.last.Sub(h.w.t0), b.holder, b.kind, b.token, b.ack.Sub(h.w.t0))
					}
				}
			}
		}
	}
}

// permits checks that no more of a semaphore's holders act at one instant
// than it has permits (rs sorted by ack).
func (h *history) permits(key string, rs []*grantRec) {
	type edge struct {
		at    time.Time
		delta int
		r     *grantRec
	}
	var edges []edge
	for _, r := range rs {
		edges = append(edges, edge{r.ack, +1, r}, edge{r.last, -1, r})
	}
	// At one instant, ends before starts: a holder acting until t and
	// one starting at t do not overlap.
	slices.SortStableFunc(edges, func(a, b edge) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.delta - b.delta
	})
	n := 0
	for _, e := range edges {
		n += e.delta
		if n > e.r.permits {
			h.w.violate("z", "%s: %d holders acting at %s, over its %d permits (%s token %d the last)", key, n, e.at.Sub(h.w.t0), e.r.permits, e.r.holder, e.r.token)
		}
	}
}
