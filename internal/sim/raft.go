package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/fencelock/fencelock/internal/auth"
	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/httpapi"
	"github.com/fencelock/fencelock/internal/replica"
	"github.com/fencelock/fencelock/internal/service"
)

// cluster is the replicated log as raft would keep it for the world's
// nodes, reduced to what the service can observe: one committed log that
// only grows, a leader that commits while it reaches a majority, entries
// in flight when a leader is lost that commit or vanish as a prefix, a
// leader elected the raft timing's time after the last one was lost, and
// followers that apply the log a message delay behind the leader. The
// nodes on it run the real service and state machine; only the raft
// protocol is modelled (hashicorp/raft's own tests, and the fault suite
// over real processes, cover it).
type cluster struct {
	w   *world
	rnd *rand.Rand // under mu

	mu       sync.Mutex
	nodes    []*simNode
	log      [][]byte // committed entries; index i+1
	leader   *simNode // the leader of the current term; nil: none
	term     uint64
	inflight []*proposal                     // the leader's proposals not yet resolved, in order
	pending  map[uint64]*proposal            // committed, to be answered when the leader applies them
	armed    bool                            // an election is scheduled
	audit    func(index uint64, data []byte) // sees each entry as it commits
}

// proposal is one Propose call.
type proposal struct {
	data []byte
	n    *simNode
	gen  int

	index    uint64 // once committed
	resolved bool   // under cluster.mu
	result   *fsm.Result
	err      error
	done     chan struct{}
}

// simNode is one node: the real service, state machine and API over the
// cluster's log, on its own clock.
type simNode struct {
	c  *cluster
	id string
	// incarnation: a crash ends one; its service, state machine and
	// log view are discarded and a restart makes new ones.
	gen     int
	clk     *simClock
	fsm     *fsm.FSM
	svc     *service.Service
	guard   *auth.Guard
	api     *httpapi.API
	lead    chan bool
	applyMu sync.Mutex // one catch-up at a time

	// under cluster.mu
	applied  uint64
	leading  bool // this incarnation believes it leads
	crashed  bool
	isolated bool  // cut off from the other nodes
	owed     *bool // a leadership change to deliver when the node resumes
	// since when the others have not heard from it (crashed, frozen or
	// cut off); zero while they do
	quietSince time.Time
}

// heartbeatTimeout is the server's default raft heartbeat timeout: a
// follower that has not heard from its leader for this long says the
// leader is silent (replica.Status.LeaderSilent) and names it to nobody.
const heartbeatTimeout = 500 * time.Millisecond

// start makes a new incarnation of n and starts its service.
func (n *simNode) start(cfg service.Config) error {
	cfg.NodeID = n.id
	cfg.ClientAddr = n.id + ":7470" // what followers name as the leader's
	cfg.Peers = peers{from: n}
	cfg.Clock = n.clk
	svc, err := service.New(cfg)
	if err != nil {
		return err
	}
	n.c.mu.Lock()
	n.gen++
	n.svc, n.fsm = svc, svc.FSM()
	n.applied, n.leading, n.crashed, n.owed, n.quietSince = 0, false, false, nil, time.Time{}
	n.lead = make(chan bool, 64)
	n.guard = auth.NewGuard(svc, cfg.Logger)
	n.api = httpapi.New(httpapi.Config{Service: svc, Guard: n.guard, Logger: cfg.Logger})
	gen := n.gen
	n.c.mu.Unlock()
	svc.Start(&replLog{n: n, gen: gen})
	n.catchUp()
	return nil
}

// catchUp applies the committed entries n has not applied, answering the
// proposals among them.
func (n *simNode) catchUp() {
	n.applyMu.Lock()
	defer n.applyMu.Unlock()
	c := n.c
	c.mu.Lock()
	if n.crashed {
		c.mu.Unlock()
		return
	}
	from, gen, f := n.applied, n.gen, n.fsm
	entries := c.log[from:]
	c.mu.Unlock()
	results := make([]*fsm.Result, len(entries))
	for i, data := range entries {
		results[i] = f.Apply(from+uint64(i)+1, 0, data)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if n.gen != gen {
		return
	}
	n.applied = from + uint64(len(entries))
	for i, r := range results {
		idx := from + uint64(i) + 1
		p := c.pending[idx]
		if p == nil || p.n != n || p.gen != gen {
			continue
		}
		delete(c.pending, idx)
		p.resolve(r, nil)
	}
}

func (p *proposal) resolve(r *fsm.Result, err error) {
	if p.resolved {
		return
	}
	p.resolved, p.result, p.err = true, r, err
	close(p.done)
}

// frozen reports whether n's process is paused. Under c.mu.
func (n *simNode) frozen() bool {
	select {
	case <-n.clk.running():
		return false
	default:
		return true
	}
}

// healthy: running, reachable. Under c.mu.
func (n *simNode) healthy() bool { return !n.crashed && !n.isolated && !n.frozen() }

// quorumLocked reports whether the leader n reaches a majority.
func (c *cluster) quorumLocked(n *simNode) bool {
	if !n.healthy() {
		return false
	}
	up := 0
	for _, m := range c.nodes {
		if m.healthy() {
			up++
		}
	}
	return up*2 > len(c.nodes)
}

// commitLocked commits the leader's proposals up to and including p, in
// order, and sends them on to the followers.
func (c *cluster) commitLocked(p *proposal) {
	var rest []*proposal
	through := false
	for _, q := range c.inflight {
		if through || q.n != p.n || q.gen != p.gen {
			rest = append(rest, q)
			continue
		}
		c.appendLocked(q)
		through = q == p
	}
	c.inflight = rest
	for _, m := range c.nodes {
		if m != p.n {
			c.replicateLocked(m)
		}
	}
}

func (c *cluster) appendLocked(q *proposal) {
	c.log = append(c.log, q.data)
	q.index = uint64(len(c.log))
	c.pending[q.index] = q
	if c.audit != nil {
		c.audit(q.index, q.data)
	}
}

// replicateLocked has m apply the log a message delay from now.
func (c *cluster) replicateLocked(m *simNode) {
	d := c.w.cfg.replDelay(c.rnd)
	time.AfterFunc(d, func() {
		c.mu.Lock()
		ok := m.healthy() && c.leader != nil && c.leader.healthy()
		c.mu.Unlock()
		if ok {
			m.catchUp()
		}
	})
}

// loseLocked ends the leadership of n's incarnation: of its proposals not
// yet committed, a prefix (chosen by the seed) turns out to have reached
// a majority and commits; the rest vanish. Neither is answered: their
// proposers learn only that leadership was lost.
func (c *cluster) loseLocked(n *simNode, why string) {
	var mine, others []*proposal
	for _, q := range c.inflight {
		if q.n == n {
			mine = append(mine, q)
		} else {
			others = append(others, q)
		}
	}
	c.inflight = others
	k := c.rnd.IntN(len(mine) + 1)
	lost := fmt.Errorf("%w: sim: leadership lost (%s) before the entry was answered", replica.ErrUnavailable, why)
	for i, q := range mine {
		if i < k {
			c.appendLocked(q)
			delete(c.pending, q.index)
		}
		q.resolve(nil, lost)
	}
	for idx, q := range c.pending {
		if q.n == n {
			delete(c.pending, idx)
			q.resolve(nil, lost)
		}
	}
	if c.leader == n {
		c.leader = nil
		c.w.tracef("raft: %s loses leadership (%s)", n.id, why)
	}
	if n.leading {
		n.leading = false
		if n.frozen() {
			f := false
			n.owed = &f
		} else if !n.crashed {
			n.lead <- false
		}
	}
	for _, m := range c.nodes {
		if m != n {
			c.replicateLocked(m)
		}
	}
	c.armLocked()
}

// armLocked schedules an election the raft timing's time from now.
func (c *cluster) armLocked() {
	if c.armed {
		return
	}
	c.armed = true
	time.AfterFunc(c.w.cfg.electionDelay(c.rnd), c.elect)
}

// elect makes a healthy node leader if the leader is gone and a majority
// is up, else tries again later.
func (c *cluster) elect() {
	c.mu.Lock()
	c.armed = false
	if c.leader != nil && c.quorumLocked(c.leader) {
		c.mu.Unlock()
		return
	}
	if c.leader != nil {
		c.loseLocked(c.leader, "no quorum")
		c.armed = false
	}
	var up []*simNode
	for _, m := range c.nodes {
		if m.healthy() {
			up = append(up, m)
		}
	}
	if len(up)*2 <= len(c.nodes) {
		c.armLocked()
		c.mu.Unlock()
		return
	}
	n := up[c.rnd.IntN(len(up))]
	c.term++
	c.leader = n
	// A node that still believed it led learns of the new term.
	for _, m := range c.nodes {
		if m != n && m.leading {
			c.loseLocked(m, "a newer term")
			c.armed = false
		}
	}
	c.w.tracef("raft: %s elected (term %d)", n.id, c.term)
	c.mu.Unlock()
	n.catchUp()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.leader == n && !n.crashed {
		n.leading = true
		c.w.leaderElected(n)
		if n.frozen() {
			t := true
			n.owed = &t
		} else {
			n.lead <- true
		}
	}
}

// crash kills n's incarnation: its service stops, what it had not
// answered is lost to it.
func (c *cluster) crash(n *simNode) {
	c.mu.Lock()
	if n.crashed {
		c.mu.Unlock()
		return
	}
	n.crashed = true
	n.quietSince = time.Now()
	if n.leading || c.leader == n {
		c.loseLocked(n, "crash")
	}
	svc, guard := n.svc, n.guard
	c.mu.Unlock()
	c.w.tracef("node %s crashes", n.id)
	svc.BeginShutdown()
	svc.Close()
	guard.Close()
}

// isolate cuts n off from the other nodes (heal: on). A leader cut off
// steps down once its lease times out; the others elect.
func (c *cluster) isolate(n *simNode, on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n.isolated = on
	n.quietSince = time.Time{}
	if on {
		n.quietSince = time.Now()
	}
	if on {
		c.w.tracef("node %s cut off", n.id)
		if n.leading {
			c.armLocked()
			time.AfterFunc(c.w.cfg.leaseTimeout(c.rnd), func() {
				c.mu.Lock()
				defer c.mu.Unlock()
				if n.leading && n.isolated {
					c.loseLocked(n, "lease timeout")
				}
			})
		}
		return
	}
	c.w.tracef("node %s reconnected", n.id)
	if n.leading && c.leader != n {
		c.loseLocked(n, "a newer term")
	}
	c.replicateLocked(n)
	if n.leading && c.leader == n {
		// Its replication goes through again: what it proposed while cut
		// off commits now (its proposers wait for the resolution).
		var last *proposal
		for _, q := range c.inflight {
			if q.n == n && q.gen == n.gen {
				last = q
			}
		}
		if last != nil && c.quorumLocked(n) {
			c.commitLocked(last)
			go n.catchUp()
		}
	}
}

// freeze pauses n's process (SIGSTOP); thaw resumes it.
func (c *cluster) freeze(n *simNode) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.w.tracef("node %s frozen", n.id)
	n.clk.pause()
	n.quietSince = time.Now()
	if c.leader == n {
		c.armLocked()
	}
}

func (c *cluster) thaw(n *simNode) {
	c.w.tracef("node %s thawed", n.id)
	n.clk.resume()
	c.mu.Lock()
	owed := n.owed
	n.owed = nil
	n.quietSince = time.Time{}
	if owed != nil && !n.crashed {
		n.lead <- *owed
	}
	if n.leading && c.leader != n {
		c.loseLocked(n, "a newer term")
	}
	c.replicateLocked(n)
	c.mu.Unlock()
}

// replLog is the replica.Replicator one incarnation of a node sees.
type replLog struct {
	n   *simNode
	gen int
}

var _ replica.Replicator = (*replLog)(nil)

func (l *replLog) current() bool { return l.n.gen == l.gen && !l.n.crashed }

// Propose commits data if this node leads a majority, after a commit's
// time; it waits while the node is frozen, and answers an unknown outcome
// if leadership is lost first.
func (l *replLog) Propose(data []byte, timeout time.Duration) (*fsm.Result, error) {
	c := l.n.c
	c.mu.Lock()
	if !l.current() || !l.n.leading {
		c.mu.Unlock()
		return nil, fmt.Errorf("%w: sim: %s does not lead", replica.ErrNotLeader, l.n.id)
	}
	p := &proposal{data: append([]byte(nil), data...), n: l.n, gen: l.gen, done: make(chan struct{})}
	c.inflight = append(c.inflight, p)
	d := c.w.cfg.commitDelay(c.rnd)
	c.mu.Unlock()

	expire := time.NewTimer(timeout)
	defer expire.Stop()
	timedOut := fmt.Errorf("%w: sim: proposal timed out", replica.ErrUnavailable)
	// await waits for ch or the proposal's resolution; false: the
	// timeout came first.
	await := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
		case <-p.done:
		case <-expire.C:
			return false
		}
		return true
	}
	commit := time.NewTimer(d)
	defer commit.Stop()
	select {
	case <-commit.C:
	case <-p.done:
	case <-expire.C:
		return nil, timedOut
	}
	for {
		c.mu.Lock()
		if p.resolved || p.index != 0 {
			c.mu.Unlock()
			break
		}
		if l.current() && c.leader == l.n && c.quorumLocked(l.n) {
			c.commitLocked(p)
			c.mu.Unlock()
			l.n.catchUp()
			break
		}
		wake := l.n.clk.running()
		c.mu.Unlock()
		if !await(wake) {
			return nil, timedOut
		}
		// Not frozen and still not committable: wait for the leadership
		// to be resolved.
		if !l.n.frozen() && !await(p.done) {
			return nil, timedOut
		}
	}
	if !await(p.done) {
		return nil, timedOut
	}
	return p.result, p.err
}

// Barrier applies what is committed, if this node leads.
func (l *replLog) Barrier(time.Duration) error {
	c := l.n.c
	c.mu.Lock()
	ok := l.current() && l.n.leading
	c.mu.Unlock()
	if !ok {
		return replica.ErrNotLeader
	}
	l.n.catchUp()
	return nil
}

func (l *replLog) Leadership() <-chan bool { return l.n.lead }

// VerifyLeader answers whether this node leads a majority now.
func (l *replLog) VerifyLeader() error {
	c := l.n.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if !l.current() || !l.n.leading || c.leader != l.n || !c.quorumLocked(l.n) {
		return replica.ErrNotLeader
	}
	return nil
}

func (l *replLog) Status() replica.Status {
	c := l.n.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if l.current() && l.n.leading {
		return replica.Status{State: replica.Leader, LeaderID: l.n.id}
	}
	st := replica.Status{State: replica.Follower}
	if c.leader != nil && !l.n.isolated {
		st.LeaderID = c.leader.id
		q := c.leader.quietSince
		st.LeaderSilent = !q.IsZero() && time.Since(q) > heartbeatTimeout
	}
	return st
}

func (l *replLog) AppliedIndex() uint64 {
	c := l.n.c
	c.mu.Lock()
	defer c.mu.Unlock()
	return l.n.applied
}

func (l *replLog) CommitIndex() uint64 {
	c := l.n.c
	c.mu.Lock()
	defer c.mu.Unlock()
	return uint64(len(c.log))
}

func (l *replLog) StartIndex() uint64                              { return 0 }
func (l *replLog) Covered(uint64, time.Duration) error             { return nil }
func (l *replLog) PendingFloor() uint64                            { return 0 }
func (l *replLog) ClearPendingFloor(uint64) error                  { return nil }
func (l *replLog) AddNonvoter(string, string, time.Duration) error { return errNoChanges }
func (l *replLog) AddVoter(string, string, time.Duration) error    { return errNoChanges }
func (l *replLog) RemoveServer(string, time.Duration) error        { return errNoChanges }
func (l *replLog) TransferLeadership() error                       { return errNoChanges }
func (l *replLog) Addr() string                                    { return l.n.id }
func (l *replLog) Dialable() bool                                  { return false }
func (l *replLog) UnreachableAfter() time.Duration                 { return time.Second }

// Contacts says nothing: the world keeps no per-peer contact times, and
// a member left out is one never heard from.
func (l *replLog) Contacts() []replica.PeerStatus { return nil }

func (l *replLog) ProbeRaft(context.Context, string, string, time.Duration) error {
	return errNoChanges
}

var errNoChanges = errors.New("sim: the world's membership is fixed")

func (l *replLog) Configuration() ([]replica.Server, error) {
	var out []replica.Server
	for _, m := range l.n.c.nodes {
		out = append(out, replica.Server{ID: m.id, Addr: m.id, Suffrage: "Voter", Voter: true})
	}
	return out, nil
}

func (l *replLog) Peers() ([]replica.PeerStatus, bool) {
	c := l.n.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if !l.current() || !l.n.leading {
		return nil, false
	}
	return nil, true
}
