package sim

import (
	"errors"
	"math/rand/v2"
	"time"

	"github.com/fencelock/fencelock/internal/node"
	"github.com/fencelock/fencelock/internal/sim/disk"
)

// nemesis injects one fault at a time, each healed before the next, as
// events of the world's loop: a node's process crashed or its machine's
// power lost (a bit of its disk rotting, now and then) and restarted, a
// node frozen and thawed, cut off from the others both ways or one way,
// its disk failing syncs or full; a client paused, cut off from a node,
// or on a lossy, duplicating network.
type nemesis struct {
	w      *world
	actors []*actor
	k      uint64 // faults so far
}

// faultCounts count the faults of each kind a world injected, and what
// came of them.
type faultCounts struct {
	Crash, Power, Freeze, Partition, Disk, Membership, ACL, Clock, Client int
	Rot                                                                   int // power losses that rotted a bit
	Refused, RefusedOther                                                 int // starts refused on a damaged disk (RefusedOther: not as a DataDirError)
	Halted                                                                int // nodes that stopped on a disk fault
}

func (f *faultCounts) add(o faultCounts) {
	f.Crash += o.Crash
	f.Power += o.Power
	f.Freeze += o.Freeze
	f.Partition += o.Partition
	f.Disk += o.Disk
	f.Membership += o.Membership
	f.ACL += o.ACL
	f.Clock += o.Clock
	f.Client += o.Client
	f.Rot += o.Rot
	f.Refused += o.Refused
	f.RefusedOther += o.RefusedOther
	f.Halted += o.Halted
}

func between(r *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(r.Int64N(int64(hi-lo)))
}

// pause is the quiet before fault k.
func (m *nemesis) pause(k uint64) time.Duration {
	return between(m.w.draw("nemesis-pause", k), 500*time.Millisecond, 4*time.Second)
}

// next injects the next fault and schedules its healing, then the one
// after it; nothing new starts at or after end.
func (m *nemesis) next(end time.Time) {
	if !time.Now().Before(end) {
		return
	}
	m.k++
	w, c := m.w, m.w.cl
	r := w.draw("nemesis", m.k)
	lead := c.leader()
	target := lead
	if target == nil || r.IntN(3) == 0 {
		target = c.nodes[r.IntN(len(c.nodes))]
	}
	a := m.actors[r.IntN(len(m.actors))]
	d := between(r, 100*time.Millisecond, 3*time.Second)
	f := fault{start: time.Now(), client: -1, leader: target == lead && lead != nil}
	var heal func()
	switch kind := r.IntN(20); {
	case kind < 3:
		w.counts.Crash++
		target.crash(false, false, "killed")
		heal = func() { target.restartAfter("killed") }
	case kind < 6 && (m.othersUp(target) || !target.disk.Doomed()):
		w.counts.Power++
		// A disk is damaged (a bit rots, or a failed sync's writes are
		// lost) only while every other node runs: a node refused for
		// good stays down (no membership change replaces it yet).
		rot := r.IntN(5) == 0 && m.othersUp(target)
		if rot {
			w.counts.Rot++
		}
		target.crash(true, rot, "power lost")
		heal = func() { target.restartAfter("power back") }
	case kind < 6:
		w.counts.Crash++
		target.crash(false, false, "killed")
		heal = func() { target.restartAfter("killed") }
	case kind < 9:
		w.counts.Freeze++
		target.freeze()
		heal = target.thaw
	case kind < 11:
		w.counts.Partition++
		w.tracef("w", "%s cut off from the other nodes for %s", target.id, d)
		m.cutOff(target, true, true, true)
		heal = func() { m.cutOff(target, true, true, false); w.tracef("w", "%s reconnected", target.id) }
	case kind < 13:
		w.counts.Partition++
		in := r.IntN(2) == 0
		way := "sends nothing out"
		if in {
			way = "hears nothing"
		}
		w.tracef("w", "%s %s for %s", target.id, way, d)
		m.cutOff(target, !in, in, true)
		heal = func() { m.cutOff(target, !in, in, false); w.tracef("w", "%s reconnected", target.id) }
	case kind < 14:
		w.counts.Disk++
		w.tracef("w", "%s's disk fails a third of its syncs for %s", target.id, d)
		target.disk.SetFaults(disk.Faults{SyncFail: 0.3, SyncForget: w.cfg.SyncForget})
		heal = func() { target.disk.SetFaults(disk.Faults{}); w.tracef("w", "%s's disk syncs again", target.id) }
	case kind < 15:
		w.counts.Disk++
		room := int64(r.IntN(64 << 10))
		w.tracef("w", "%s's disk fills up (%d bytes left) for %s", target.id, room, d)
		target.disk.SetFaults(disk.Faults{Capacity: target.disk.Used() + room})
		heal = func() { target.disk.SetFaults(disk.Faults{}); w.tracef("w", "%s's disk has room again", target.id) }
	default:
		f.leader, f.client = false, a.i
		w.counts.Client++
		switch r.IntN(3) {
		case 0:
			w.tracef("w", "client %d paused for %s", a.i, d)
			a.clk.pause()
			heal = func() { a.clk.resume(); w.tracef("w", "client %d resumed", a.i) }
		case 1:
			a.net.setCut(target.id, true)
			w.tracef("w", "client %d cut off from %s for %s", a.i, target.id, d)
			heal = func() { a.net.setCut(target.id, false) }
		default:
			a.net.setLossy(0.2, 0.1)
			w.tracef("w", "client %d on a lossy network for %s", a.i, d)
			heal = func() { a.net.setLossy(0, 0) }
		}
	}
	w.at(d, func() {
		heal()
		f.end = time.Now()
		w.mu.Lock()
		w.faults = append(w.faults, f)
		w.mu.Unlock()
		w.at(m.pause(m.k), func() { m.next(end) })
	})
}

// othersUp says whether every node but n runs.
func (m *nemesis) othersUp(n *simNode) bool {
	for _, o := range m.w.cl.nodes {
		if o != n && (o.down || o.dead) {
			return false
		}
	}
	return true
}

// cutOff cuts (cut) or heals n's links to every other node: out, in, or
// both.
func (m *nemesis) cutOff(n *simNode, out, in, cut bool) {
	c := m.w.cl
	for _, o := range c.nodes {
		if o == n {
			continue
		}
		if out {
			c.setCut(n, o, cut)
		}
		if in {
			c.setCut(o, n, cut)
		}
	}
	c.noteQuorum()
}

// restartAfter starts n again, unless it is gone for good. A third of
// the time its disk returns a flipped bit now and then while it starts;
// a start refused only for that is tried again. A start refused on a
// disk the world rotted leaves the node down for good; refused on any
// other, it is a violation. (A failed sync damages it too: what it
// dropped is lost at the next power loss, while what the process wrote
// after it, built on what the cache still showed, is not.)
func (n *simNode) restartAfter(why string) {
	if n.dead || !n.down {
		return
	}
	w := n.c.w
	flips := why != "boot" && w.draw("flips:"+n.id, uint64(n.inc)).IntN(3) == 0
	before := n.disk.Stats().Flipped
	if flips {
		n.disk.SetFaults(disk.Faults{Flip: 0.002})
	}
	err := n.restart(why)
	if flips {
		n.disk.SetFaults(disk.Faults{})
	}
	if err == nil {
		return
	}
	var dde *node.DataDirError
	switch {
	case n.disk.Damaged():
		n.dead = true
		w.counts.Refused++
		if !errors.As(err, &dde) {
			w.counts.RefusedOther++
		}
	case n.disk.Stats().Flipped > before:
		w.at(500*time.Millisecond, func() { n.restartAfter(why + ", again") })
	default:
		w.violate("w", "%s refused to start on a disk the world did not damage: %v", n.id, err)
	}
}

// fault is one fault the nemesis injected, for judging lost leases: on
// the node that led when it began (leader), or on one client process.
type fault struct {
	start, end time.Time
	leader     bool
	client     int // -1: a node's fault
}

func (cn *clientNet) setCut(node string, cut bool) {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	cn.cut[node] = cut
}

func (cn *clientNet) setLossy(drop, dup float64) {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	cn.drop, cn.dup = drop, dup
}
