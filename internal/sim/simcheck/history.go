package simcheck

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

// Reporter is where the checks tell what they find: src is the trace's
// source a line is from ("w" for the world's loop, "z" for the checks
// after it).
type Reporter interface {
	Tracef(src, format string, args ...any)
	Violate(src, format string, args ...any)
}

// Grant is one grant a client was answered, and how long its holder
// acted under it (virtual time).
type Grant struct {
	Client  int
	Kind    string // lock, sem, read, write
	Key     string
	Holder  string
	Token   uint64
	Permits int
	Ack     time.Time // the answer arrived
	Last    time.Time // the last instant the holder acted under it
	Acted   bool      // it acted at all (from Ack to Last)
}

// History checks the world: the committed log as the nodes applied it
// (the same entry at each index on every node), and as an auditor's own
// state machine applies it (tokens rising, no waiter skipped), and what
// the clients believed (no two exclusive holders acting at one instant,
// no more than the permits, no writer beside a reader, every
// acknowledged grant committed).
type History struct {
	r       Reporter
	t0      time.Time // the world's start, which the violations count from
	verbose bool      // trace every event of the committed log
	f       *fsm.FSM
	mu      sync.Mutex
	all     []*Grant

	// The auditor's, under amu (the loop writes, the watcher reads).
	amu       sync.Mutex
	log       []auditEntry // the committed log, index i+1
	lastToken map[string]uint64
	queue     map[string][]string  // exclusive keys: the waiters, head first
	committed map[string]bool      // key|holder|token of every committed grant
	events    []api.WatchEvent     // every event, as a watch must tell it
	confs     []etcd.Entry         // the configuration changes, in log order
	ledger    *ledger              // the audit by a model of its own
	quotas    *Quotas              // the quotas the log is held to (nil: none)
	owners    map[string][]ownerAt // each followed owner's counts, as they changed
}

// auditEntry is one committed entry as the first node to apply it did.
type auditEntry struct {
	term uint64
	sum  uint64 // FNV-64a of its command (0: none)
	by   string // the node that applied it first
}

// NewHistory is an empty history of a world that began at t0.
func NewHistory(r Reporter, t0 time.Time, verbose bool) *History {
	h := &History{r: r, t0: t0, verbose: verbose, lastToken: map[string]uint64{},
		queue: map[string][]string{}, committed: map[string]bool{}}
	h.f = fsm.New(h.observe)
	h.ledger = newLedger(h)
	return h
}

// Applied is told what node n's incarnation inc applied: a snapshot up
// to restored first, then ents. Each index must hold the same entry on
// every node; the first to apply an index adds it to the committed log,
// which the auditor applies.
func (h *History) Applied(n string, inc int, restored uint64, ents []etcd.Entry) {
	h.amu.Lock()
	defer h.amu.Unlock()
	if restored > uint64(len(h.log)) {
		h.r.Violate("w", "%s restored a snapshot at %d, beyond the %d entries any node applied", n, restored, len(h.log))
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
				h.r.Violate("w", "%s (incarnation %d) applied entry %d of term %d, where %s applied one of term %d (commands %x, %x)",
					n, inc, e.Index, e.Term, a.by, a.term, sum, a.sum)
			}
		case e.Index == have+1:
			h.log = append(h.log, auditEntry{term: e.Term, sum: sum, by: n})
			if e.Data != nil {
				cmd, err := fsm.Decode(e.Data)
				if err != nil {
					h.r.Violate("w", "entry %d does not decode: %v", e.Index, err)
					continue
				}
				h.ledger.begin(e.Index, cmd)
				h.ledger.end(h.f.Apply(e.Index, e.Term, e.Data))
				h.countOwners(e.Index)
			}
			if e.Conf && e.Member != 0 {
				h.confs = append(h.confs, e)
			}
		default:
			h.r.Violate("w", "%s applied entry %d, after only %d entries any node applied", n, e.Index, have)
		}
	}
}

// Confs are the configuration changes of the committed log up to index,
// in log order, then those of more after index (committed, not yet
// applied anywhere).
func (h *History) Confs(index uint64, more ...etcd.Entry) []etcd.Entry {
	h.amu.Lock()
	defer h.amu.Unlock()
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
	return confs
}

func grantKey(key, holder string, token uint64) string {
	return fmt.Sprintf("%s|%s|%d", key, holder, token)
}

func (h *History) observe(index uint64, ev locktable.Event) {
	if h.verbose {
		h.r.Tracef("w", "log %d: %s %s %s token %d at %s since %s expiry %s", index, ev.Kind, ev.Key, ev.Holder, ev.Token,
			time.Duration(ev.At), time.Duration(ev.Since), time.Duration(ev.Expiry))
	}
	h.expect(index, ev)
	h.ledger.event(ev)
	exclusive := strings.HasPrefix(ev.Key, "lock/")
	switch ev.Kind {
	case locktable.EventGranted:
		if ev.Token <= h.lastToken[ev.Key] {
			h.r.Violate("w", "entry %d: %s granted %s token %d, not above the key's last token %d", index, ev.Holder, ev.Key, ev.Token, h.lastToken[ev.Key])
		}
		h.lastToken[ev.Key] = max(h.lastToken[ev.Key], ev.Token)
		h.committed[grantKey(ev.Key, ev.Holder, ev.Token)] = true
		if !exclusive {
			return
		}
		q := h.queue[ev.Key]
		if i := slices.Index(q, ev.Holder); i >= 0 {
			if i > 0 {
				h.r.Violate("w", "entry %d: %s granted %s from the queue ahead of %s", index, ev.Holder, ev.Key, strings.Join(q[:i], ", "))
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

// Granted records a grant a client was answered.
func (h *History) Granted(r *Grant) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.all = append(h.all, r)
}

// Worked records that r's holder acts under it now.
func (h *History) Worked(r *Grant) {
	h.mu.Lock()
	defer h.mu.Unlock()
	r.Last, r.Acted = time.Now(), true
}

// Acked is how many grants clients were answered.
func (h *History) Acked() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.all)
}

// Finish runs the checks over what the clients believed.
func (h *History) Finish() {
	h.mu.Lock()
	all := append([]*Grant(nil), h.all...)
	h.mu.Unlock()
	h.amu.Lock()
	for _, r := range all {
		if !h.committed[grantKey(r.Key, r.Holder, r.Token)] {
			h.r.Violate("z", "%s was answered %s token %d, which the committed log never granted", r.Holder, r.Key, r.Token)
		}
	}
	h.amu.Unlock()
	byKey := map[string][]*Grant{}
	for _, r := range all {
		if r.Acted {
			byKey[r.Key] = append(byKey[r.Key], r)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(byKey)) {
		rs := byKey[k]
		slices.SortFunc(rs, func(a, b *Grant) int { return a.Ack.Compare(b.Ack) })
		if rs[0].Kind == "sem" {
			h.permits(k, rs)
			continue
		}
		for i, a := range rs {
			for _, b := range rs[i+1:] {
				if b.Ack.After(a.Last) {
					break
				}
				// b began acting while a still did.
				switch {
				case a.Kind == "read" && b.Kind == "read":
				default:
					if a.Token != b.Token {
						h.r.Violate("z", "%s: %s (%s token %d) acted until %s, after %s (%s token %d) was granted at %s",
							k, a.Holder, a.Kind, a.Token, a.Last.Sub(h.t0), b.Holder, b.Kind, b.Token, b.Ack.Sub(h.t0))
					}
				}
			}
		}
	}
}

// permits checks that no more of a semaphore's holders act at one instant
// than it has permits (rs sorted by ack).
func (h *History) permits(key string, rs []*Grant) {
	type edge struct {
		at    time.Time
		delta int
		r     *Grant
	}
	var edges []edge
	for _, r := range rs {
		edges = append(edges, edge{r.Ack, +1, r}, edge{r.Last, -1, r})
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
		if n > e.r.Permits {
			h.r.Violate("z", "%s: %d holders acting at %s, over its %d permits (%s token %d the last)", key, n, e.at.Sub(h.t0), e.r.Permits, e.r.Holder, e.r.Token)
		}
	}
}
