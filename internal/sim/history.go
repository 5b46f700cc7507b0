package sim

import (
	"slices"

	"github.com/fencelock/fencelock/internal/node/etcd"
	"github.com/fencelock/fencelock/internal/sim/simcheck"
)

// What the world judges itself of its history, knowing how it runs: the
// voters of a configuration (the checks are simcheck's).

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

// lost notes a lease its holder found lost while it still meant to hold
// it, judged at the end (judgeLosses).
func (w *world) lost(l simcheck.Loss) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.losses = append(w.losses, l)
}

// judgeLosses judges the leases lost against the world's faults,
// elections and outages (simcheck.History.JudgeLosses).
func (w *world) judgeLosses() {
	w.mu.Lock()
	losses := slices.Clone(w.losses)
	faults := slices.Clone(w.faults)
	elected := slices.Clone(w.elected)
	outages := slices.Clone(w.outages)
	w.mu.Unlock()
	w.hist.JudgeLosses(losses, faults, elected, outages)
}
