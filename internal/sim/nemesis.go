package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/service"

	"github.com/fencelock/fencelock/internal/node"
	"github.com/fencelock/fencelock/internal/sim/disk"
	"github.com/fencelock/fencelock/internal/sim/simcheck"
	"github.com/fencelock/fencelock/internal/sim/simrand"
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
	chain  int    // which of the world's nemeses (Config.Nemeses)
	k      uint64 // faults so far
}

// faultCounts count the faults of each kind a world injected, and what
// came of them.
type faultCounts struct {
	Crash, Power, Freeze, Partition, Disk, Membership, ACL, Clock, Client int
	Rot                                                                   int // power losses that rotted a bit
	Refused, RefusedOther                                                 int // starts refused on a damaged disk (RefusedOther: not as a DataDirError)
	Halted                                                                int // nodes that stopped on a disk fault
	RotUnseen                                                             int // restarts that lost entries to rot after the watermark
	Quota                                                                 int // calls refused quota_exceeded (not a fault: a count)
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
	f.RotUnseen += o.RotUnseen
	f.Quota += o.Quota
}

// The nemesis's focuses (Config.Focus).
const (
	focusRot    = "rot"    // power losses only, each rotting the log's tail
	focusLeases = "leases" // one key waited on by every actor; a client cut off from every node for about a TTL
	// focusMembership: members replaced, while nodes are frozen or cut off
	focusMembership = "membership"
	// focusFailover: the leases' world (one key waited on by every actor,
	// clients cut off from every node for about a TTL) with leaders
	// frozen or cut off between, so that leases outlive failovers
	focusFailover = "failover"
	focusClock    = "clock" // clocks changing rate and stepping only
)

// oneKey says whether the focus has every actor wait on one key.
func oneKey(focus string) bool { return focus == focusLeases || focus == focusFailover }

// The kinds of fault.
const (
	kindCrash = iota
	kindPower
	kindPowerRot
	kindFreeze
	kindIsolate
	kindOneWay
	kindSyncFail
	kindFull
	kindMembership
	kindClient
	kindClientCutAll
	kindClock
	kindACL // drawn apart, with ACLs on (acl.go)
)

// weights are how often the nemesis picks each kind, by focus.
var weights = map[string][]int{
	"":              {kindCrash: 3, kindPower: 3, kindPowerRot: 1, kindFreeze: 3, kindIsolate: 2, kindOneWay: 2, kindSyncFail: 1, kindFull: 1, kindMembership: 1, kindClient: 5, kindClock: 1},
	focusRot:        {kindPowerRot: 1},
	focusLeases:     {kindClientCutAll: 1},
	focusMembership: {kindMembership: 2, kindFreeze: 1, kindOneWay: 1},
	focusFailover:   {kindFreeze: 1, kindIsolate: 1, kindClientCutAll: 2},
	focusClock:      {kindClock: 1},
}

// pause is the quiet before fault k.
func (m *nemesis) pause(k uint64) time.Duration {
	return simrand.Between(m.w.draw(fmt.Sprintf("nemesis%d-pause", m.chain), k), 500*time.Millisecond, 4*time.Second)
}

// next injects the next fault and schedules its healing, then the one
// after it; nothing new starts at or after end.
func (m *nemesis) next(end time.Time) {
	if !time.Now().Before(end) {
		return
	}
	m.k++
	w, c := m.w, m.w.cl
	r := w.draw(fmt.Sprintf("nemesis%d", m.chain), m.k)
	lead := c.leader()
	members := m.members()
	target := lead
	if target == nil || r.IntN(3) == 0 {
		target = members[r.IntN(len(members))]
	}
	a := m.actors[r.IntN(len(m.actors))]
	if w.cfg.Focus == focusFailover {
		// the first actor from a that holds something: its lease must
		// outlive the cut on its keep-alive alone
		for i := range m.actors {
			if b := m.actors[(a.i+i)%len(m.actors)]; b.holding.Load() {
				a = b
				break
			}
		}
	}
	d := simrand.Between(r, 100*time.Millisecond, 3*time.Second)
	f := simcheck.Fault{Start: time.Now(), Client: -1, Leader: target == lead && lead != nil}
	var heal func()
	kind := simrand.Pick(r, weights[w.cfg.Focus])
	var ra *rand.Rand
	if w.cfg.ACL && m.chain == 0 {
		// (a draw of its own: the other faults stay what they were)
		if ra = w.draw("nemesis-acl", m.k); ra.IntN(5) == 0 {
			kind = kindACL
		}
	}
	if kind == kindClock && w.cfg.FastLeader > 0 {
		kind = kindFreeze // the leaders' clocks are the plant's
	}
	if kind == kindMembership && m.chain > 0 {
		kind = kindFreeze // one operator at a time
	}
	if oneKey(w.cfg.Focus) {
		d = simrand.Between(r, time.Second, 4*time.Second) // about a lease's length
	}
	if kind == kindMembership {
		// an operator's replacement of a member, which heals when its
		// calls end
		m.replace(r, func() {
			w.at(m.pause(m.k), func() { m.next(end) })
		})
		return
	}
	switch kind {
	case kindACL:
		// an actor's, never the prober's or the watcher's
		a = m.actors[ra.IntN(len(m.actors)-2)]
		f.Leader, f.Client = false, a.i
		w.counts.ACL++
		heal = m.aclFault(ra, a, d)
	case kindClientCutAll:
		f.Leader, f.Client = false, a.i
		w.counts.Client++
		w.tracef("w", "client %d cut off from every node for %s", a.i, d)
		for _, n := range c.all() {
			a.net.setCut(n.id, true)
		}
		heal = func() {
			for _, n := range c.all() {
				a.net.setCut(n.id, false)
			}
		}
	case kindCrash:
		w.counts.Crash++
		if n := m.follower(r); n != nil && r.IntN(2) == 0 {
			target, f.Leader = n, false
			m.crashAtAck(target, d, false)
		} else {
			target.crash(false, disk.NoRot, "killed")
		}
		heal = func() { target.restartAfter("killed") }
	case kindPower, kindPowerRot:
		if !m.othersUp(target) && target.disk.Doomed() {
			// the disk would be damaged with a node down already
			w.counts.Crash++
			target.crash(false, disk.NoRot, "killed")
			heal = func() { target.restartAfter("killed") }
			break
		}
		w.counts.Power++
		// A disk is damaged (a bit rots, or a failed sync's writes are
		// lost) only while every other node runs: a node refused for
		// good stays down (no membership change replaces it yet).
		rot := disk.NoRot
		switch {
		case !m.othersUp(target):
		case w.cfg.Focus == focusRot:
			rot = disk.RotTail
		case kind == kindPowerRot:
			rot = disk.RotAny
		}
		if rot != disk.NoRot {
			w.counts.Rot++
		}
		target.crash(true, rot, "power lost")
		heal = func() { target.restartAfter("power back") }
	case kindClock:
		// A process's clock changes its rate (NTP slewing it, a VM's
		// clock source): anywhere within the drift bound, a jump from
		// one end to the other at worst.
		w.counts.Clock++
		p, what := target.clk, target.id
		was := 1 + target.drift
		client := r.IntN(2) == 0
		if client {
			f.Leader, f.Client = false, a.i
			p, what, was = a.clk, fmt.Sprintf("client %d", a.i), 1+a.drift
		}
		if rs := w.draw(fmt.Sprintf("nemesis%d-step", m.chain), m.k); rs.IntN(2) == 0 {
			// Or it steps, the way DESIGN.md's time section tolerates: a
			// client's forward (its deadlines come sooner: it stops
			// early), a node's back (cluster time never goes back: the
			// state machine keeps the later time, and leases last the
			// longer).
			step := simrand.Between(rs, 10*time.Millisecond, 2*time.Second)
			dir := "back"
			if client {
				step = simrand.Between(rs, 10*time.Millisecond, time.Second)
				dir = "forward"
			} else {
				step = -step
			}
			w.tracef("w", "%s's clock steps %s %s", what, dir, step.Abs())
			p.Step(step)
			heal = func() {}
			break
		}
		rate := 1 + clockDrift(r)
		w.tracef("w", "%s's clock runs at %.4f for %s", what, rate, d)
		p.SetRate(rate)
		heal = func() { p.SetRate(was); w.tracef("w", "%s's clock runs at %.4f again", what, was) }
	case kindFreeze:
		w.counts.Freeze++
		target.freeze()
		heal = target.thaw
	case kindIsolate:
		w.counts.Partition++
		w.tracef("w", "%s cut off from the other nodes for %s", target.id, d)
		m.cutOff(target, true, true, true)
		heal = func() { m.cutOff(target, true, true, false); w.tracef("w", "%s reconnected", target.id) }
	case kindOneWay:
		w.counts.Partition++
		in := r.IntN(2) == 0
		way := "sends nothing out"
		if in {
			way = "hears nothing"
		}
		w.tracef("w", "%s %s for %s", target.id, way, d)
		m.cutOff(target, !in, in, true)
		heal = func() { m.cutOff(target, !in, in, false); w.tracef("w", "%s reconnected", target.id) }
	case kindSyncFail:
		w.counts.Disk++
		w.tracef("w", "%s's disk fails a third of its syncs for %s", target.id, d)
		target.disk.SetFaults(disk.Faults{SyncFail: 0.3, SyncForget: w.cfg.SyncForget})
		heal = func() { target.disk.SetFaults(disk.Faults{}); w.tracef("w", "%s's disk syncs again", target.id) }
	case kindFull:
		w.counts.Disk++
		room := int64(r.IntN(64 << 10))
		w.tracef("w", "%s's disk fills up (%d bytes left) for %s", target.id, room, d)
		target.disk.SetFaults(disk.Faults{Capacity: target.disk.Used() + room})
		heal = func() { target.disk.SetFaults(disk.Faults{}); w.tracef("w", "%s's disk has room again", target.id) }
	default:
		f.Leader, f.Client = false, a.i
		w.counts.Client++
		switch r.IntN(3) {
		case 0:
			w.tracef("w", "client %d paused for %s", a.i, d)
			a.clk.Pause()
			heal = func() { a.clk.Resume(); w.tracef("w", "client %d resumed", a.i) }
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
	// Recorded now, open (no end), so that a fault the world ends in
	// still explains what it caused.
	w.mu.Lock()
	i := len(w.faults)
	w.faults = append(w.faults, f)
	w.mu.Unlock()
	w.at(d, func() {
		heal()
		w.mu.Lock()
		w.faults[i].End = time.Now()
		w.mu.Unlock()
		w.at(m.pause(m.k), func() { m.next(end) })
	})
}

// follower is a running member that does not lead, drawn from r; nil
// when there is none.
func (m *nemesis) follower(r *rand.Rand) *simNode {
	var fs []*simNode
	for _, n := range m.members() {
		if !n.down && !n.frozen && !n.halted && !n.leading {
			fs = append(fs, n)
		}
	}
	if len(fs) == 0 {
		return nil
	}
	return fs[r.IntN(len(fs))]
}

// crashAtAck kills n's process (power: its machine loses power) just
// after it next acknowledges entries it appended: the instant a node that
// answered for entries it had not yet made durable loses them. If it
// sends no such answer within half the fault's length d, it is killed
// then.
func (m *nemesis) crashAtAck(n *simNode, d time.Duration, power bool) {
	why := "killed just after it acknowledged entries"
	if power {
		why = "power lost just after it acknowledged entries"
	}
	n.atAck = func() { n.crash(power, disk.NoRot, why) }
	m.w.at(d/2, n.fireAtAck)
}

// members are the voters of the configuration, and the nodes being
// added (the nemesis's targets).
func (m *nemesis) members() []*simNode {
	var out []*simNode
	for _, n := range m.w.cl.all() {
		if !n.gone && (n.join && !n.down || slices.Contains(m.w.cl.votersAt(^uint64(0)), n)) {
			out = append(out, n)
		}
	}
	return out
}

// replace is an operator's change of the membership, as `fencelock
// remove` and `fencelock join` make it through the leader's service: one
// member out (the one refused for good if there is one, else a
// follower, crashed first a third of the time, so that it is removed
// while down), then a new node in its place. The calls run in a
// goroutine of their own; the loop stops the removed node (after it
// lingers a while, still running) and starts the new one when the calls
// hand it back; done runs when they are over.
func (m *nemesis) replace(r *rand.Rand, done func()) {
	w, c := m.w, m.w.cl
	voters := w.cl.votersAt(^uint64(0))
	var victim *simNode
	for _, v := range voters {
		if v.dead {
			victim = v
		}
	}
	if victim == nil {
		var followers []*simNode
		for _, v := range voters {
			if !v.leading {
				followers = append(followers, v)
			}
		}
		if len(followers) == 0 || len(voters) < 3 {
			w.at(0, done)
			return
		}
		victim = followers[r.IntN(len(followers))]
	}
	w.counts.Membership++
	downFirst := !victim.down && r.IntN(3) == 0
	if downFirst {
		victim.crash(false, disk.NoRot, "stopped, to be removed while down")
	}
	linger := simrand.Between(r, 500*time.Millisecond, 3*time.Second)
	fresh := c.addNode(true, victim.addr)
	w.tracef("w", "membership: removing %s (down: %v), then joining %s", victim.id, victim.down, fresh.id)
	w.ops.Add(1)
	go func() {
		defer w.ops.Done()
		err := c.operate(func(ctx context.Context, s *service.Service) error {
			_, err := s.Remove(ctx, api.RemoveRequest{ID: victim.id})
			return err
		})
		removed := make(chan struct{})
		w.hand(func() {
			defer close(removed)
			w.tracef("w", "membership: removing %s: %v", victim.id, err)
			if err != nil {
				if downFirst {
					victim.restartAfter("not removed")
				}
				return
			}
			victim.gone = true
			w.at(linger, func() { victim.crash(false, disk.NoRot, "removed") })
			c.takeOver(fresh)
			fresh.restartAfter("to join")
		})
		<-removed
		if err == nil {
			time.Sleep(200 * time.Millisecond) // as an operator starts the new node first
			err = c.operate(func(ctx context.Context, s *service.Service) error {
				_, err := s.Join(ctx, api.JoinRequest{ID: fresh.id, RaftAddr: fresh.id, ClientAddr: fresh.addr})
				return err
			})
			w.hand(func() { w.tracef("w", "membership: joining %s: %v", fresh.id, err) })
		}
		w.hand(done)
	}()
}

// othersUp says whether every node but n runs.
func (m *nemesis) othersUp(n *simNode) bool {
	voters := m.w.cl.votersAt(^uint64(0))
	if len(voters) < 2 {
		// A node alone refused on a damaged disk is repaired by
		// fencelock recover, which does not read the etcd engine's log
		// yet: the world does not damage its disk.
		return false
	}
	for _, o := range voters {
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
	if n.dead || n.gone || !n.down {
		return
	}
	w := n.c.w
	flips := w.cfg.Flips && why != "boot" && w.draw("flips:"+n.id, uint64(n.inc)).IntN(3) == 0
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
