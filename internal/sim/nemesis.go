package sim

import (
	"math/rand/v2"
	"time"

	"github.com/fencelock/fencelock/internal/service"
)

// nemesis injects one fault at a time, each healed before the next:
// a node crashed and restarted, frozen and thawed, or cut off from the
// other nodes; a client paused, cut off from the leader, or on a lossy,
// duplicating network.
type nemesis struct {
	w      *world
	rnd    *rand.Rand
	actors []*actor
	scfg   service.Config
}

func (m *nemesis) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(m.rnd.Int64N(int64(hi-lo)))
}

func (m *nemesis) run(end time.Time) {
	c := m.w.cl
	for {
		time.Sleep(m.between(500*time.Millisecond, 4*time.Second))
		if !time.Now().Before(end) {
			return
		}
		c.mu.Lock()
		target := c.leader
		if target == nil || m.rnd.IntN(3) == 0 {
			target = c.nodes[m.rnd.IntN(len(c.nodes))]
		}
		c.mu.Unlock()
		a := m.actors[m.rnd.IntN(len(m.actors))]
		d := m.between(100*time.Millisecond, 3*time.Second)
		kind := m.rnd.IntN(6)
		f := fault{start: time.Now(), client: -1}
		switch kind {
		case 0, 1, 2:
			c.mu.Lock()
			f.leader = c.leader == target
			c.mu.Unlock()
		default:
			f.client = a.i
		}
		switch kind {
		case 0:
			c.crash(target)
			time.Sleep(d)
			m.w.tracef("node %s restarts", target.id)
			if err := target.start(m.scfg); err != nil {
				m.w.violate("restarting %s: %v", target.id, err)
			}
		case 1:
			c.freeze(target)
			time.Sleep(d)
			c.thaw(target)
		case 2:
			c.isolate(target, true)
			time.Sleep(d)
			c.isolate(target, false)
		case 3:
			m.w.tracef("client %d paused for %s", a.i, d)
			a.clk.pause()
			time.Sleep(d)
			a.clk.resume()
			m.w.tracef("client %d resumed", a.i)
		case 4:
			a.net.mu.Lock()
			a.net.cut[target.id] = true
			a.net.mu.Unlock()
			m.w.tracef("client %d cut off from %s for %s", a.i, target.id, d)
			time.Sleep(d)
			a.net.mu.Lock()
			a.net.cut[target.id] = false
			a.net.mu.Unlock()
		case 5:
			a.net.mu.Lock()
			a.net.drop, a.net.dup = 0.2, 0.1
			a.net.mu.Unlock()
			m.w.tracef("client %d on a lossy network for %s", a.i, d)
			time.Sleep(d)
			a.net.mu.Lock()
			a.net.drop, a.net.dup = 0, 0
			a.net.mu.Unlock()
		}
		f.end = time.Now()
		m.w.mu.Lock()
		m.w.faults = append(m.w.faults, f)
		m.w.mu.Unlock()
	}
}

// fault is one fault the nemesis injected, for judging lost leases: on
// the node that led when it began (leader), or on one client process.
type fault struct {
	start, end time.Time
	leader     bool
	client     int // -1: a node's fault
}
