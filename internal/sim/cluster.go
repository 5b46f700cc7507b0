package sim

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/fencelock/fencelock/internal/auth"
	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/httpapi"
	"github.com/fencelock/fencelock/internal/node"
	"github.com/fencelock/fencelock/internal/node/etcd"
	"github.com/fencelock/fencelock/internal/replica"
	"github.com/fencelock/fencelock/internal/service"
	"github.com/fencelock/fencelock/internal/sim/disk"
	"github.com/fencelock/fencelock/internal/sim/simcheck"
	"github.com/fencelock/fencelock/internal/sim/simclock"
)

// cluster is the world's servers: each a real service and HTTP API over a
// real etcd engine node (stepped: its raft, log, state file, floors and
// snapshots move only in the world's loop), on a disk of its own, with
// raft messages carried between them by the world (send) over links a
// partition can cut one way or both.
type cluster struct {
	w       *world
	log     *slog.Logger
	scfg    service.Config
	peers   []node.Peer // the initial configuration
	initial int         // how many of nodes it names

	// What goroutines read of the nodes and links (the loop writes it).
	mu    sync.Mutex
	nodes []*simNode
	byID  map[uint64]*simNode
	cut   map[link]bool // links that pass nothing, one way
	// at is the node at each client address: a node that replaces
	// another takes over its address, as a new machine given the old
	// one's name does (the clients' lists stay as they were)
	at map[string]*simNode

	// the loop's own
	sent   map[link]uint64    // messages sent on each link so far
	lastAt map[link]time.Time // when the last one sent arrives (links keep order, as TCP does)

	closers sync.WaitGroup   // services of crashed incarnations winding down
	outage  bool             // fewer than a majority of nodes can work together now
	audited uint64           // the committed entries the quorum audit has checked
	leadSvc *service.Service // the service of the last node to lead (under mu)
}

// link is one direction between two nodes.
type link struct{ from, to string }

// simNode is one server machine: its disk and clock outlive the
// processes (incarnations) that run on it.
type simNode struct {
	c     *cluster
	id    string
	mid   uint64 // etcd member id
	addr  string // its client port's address
	disk  *disk.Disk
	clk   *simclock.Clock
	drift float64

	// under c.mu
	inc    int // incarnation: a crash ends one, a start begins the next
	st     *etcd.Stepped
	svc    *service.Service
	guard  *auth.Guard
	api    http.Handler
	down   bool // not running: crashed, refused, or not started
	frozen bool

	// the loop's own
	held     []func() // what arrived while the process was stopped
	tickOwed bool
	// writeDue: a Write of the node's queued log writes is scheduled;
	// writes counts this incarnation's
	writeDue bool
	writes   uint64
	halted   bool
	leading  bool
	term     uint64
	dead     bool   // refused to start on a damaged disk: down for good
	join     bool   // started to join the cluster, not of its first configuration
	state    string // raft's state, for the debug trace
	gone     bool   // removed from the configuration: never started again
	// the highest token any incarnation applied, and whether one met a
	// disk fault (then its ceiling may rightly lag: it answered no grant)
	topToken uint64
	floorOff bool
	// what the state file on the disk said had been written, after the
	// last crash; whether a read returned a flipped bit as it started
	watermark uint64
	flipped   bool
	// the watermark the last process held when it crashed: entries after
	// it were being deleted (a suffix raft replaced), not lost
	disowned uint64
	// atAck, when set, kills the process just after it next acknowledges
	// entries it appended (nemesis.crashAtAck); sentAck: the step under
	// way sent an append's answer
	atAck   func()
	sentAck bool
}

func newCluster(w *world) *cluster {
	c := &cluster{w: w, log: slog.New(slog.DiscardHandler), byID: map[uint64]*simNode{}, cut: map[link]bool{}, at: map[string]*simNode{},
		sent: map[link]uint64{}, lastAt: map[link]time.Time{}}
	c.scfg = service.Config{
		Logger:       c.log,
		ApplyTimeout: 5 * time.Second, MinTickInterval: 10 * time.Millisecond, ClockCheckpoint: time.Second,
		JoinCatchUp: time.Second, AnnounceEvery: time.Second,
		MaxWaitersPerKey: 1000, MaxWaiters: 100000,
		WatchHistory: 10000, WatchMaxWatchers: 1000, WatchMaxPerCaller: 100,
	}
	for i := range w.cfg.Nodes {
		n := c.addNode(false, fmt.Sprintf("s%d:7470", i+1))
		c.peers = append(c.peers, node.Peer{ID: n.id, RaftAddr: n.id})
	}
	c.initial = len(c.nodes)
	return c
}

// addNode makes the next machine, not started: one of the first
// configuration, or one to join it (join), whose client port is to be at
// addr (a joining one's once it takes it over: takeOver).
func (c *cluster) addNode(join bool, addr string) *simNode {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := c.w
	id := fmt.Sprintf("n%d", len(c.nodes)+1)
	n := &simNode{c: c, id: id, mid: etcd.MemberID(id), disk: disk.New(w.draw("disk:"+id, 0).Uint64()),
		drift: clockDrift(w.draw("drift:"+id, 0)), down: true, join: join, addr: addr}
	n.clk = simclock.New(time.Now(), n.drift, w.dues)
	c.nodes = append(c.nodes, n)
	c.byID[n.mid] = n
	if !join {
		c.at[addr] = n
	}
	return n
}

// takeOver gives n its client address, from the node it replaces.
func (c *cluster) takeOver(n *simNode) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at[n.addr] = n
}

// reach is the node a call to the client address addr reaches now.
func (c *cluster) reach(addr string) *simNode {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.at[addr]
}

// all is every machine so far (the list grows with joins).
func (c *cluster) all() []*simNode {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.nodes)
}

// boot starts every node, each a few milliseconds apart (so that their
// timers do not fall at one instant).
func (c *cluster) boot() {
	for _, n := range c.nodes {
		d := time.Duration(c.w.draw("boot:"+n.id, 0).Int64N(int64(10 * time.Millisecond)))
		c.w.at(d, func() { n.restartAfter("boot") })
	}
}

// start runs a new incarnation of n over its disk.
func (n *simNode) start() (err error) {
	c, w := n.c, n.c.w
	defer func() {
		// A node must refuse a data directory it cannot start on with
		// an error, never die of a panic.
		if p := recover(); p != nil {
			w.violate("w", "%s panicked starting: %v", n.id, p)
			err = fmt.Errorf("panicked: %v", p)
		}
	}()
	cfg := c.scfg
	cfg.NodeID, cfg.ClientAddr, cfg.Clock, cfg.Peers = n.id, n.addr, n.clk, peers{from: n}
	svc, err := service.New(cfg)
	if err != nil {
		return err
	}
	inc := n.inc + 1
	var boot []node.Peer
	if !n.join {
		boot = c.peers
	}
	st, err := etcd.OpenStepped(node.Config{
		DataDir: "/" + n.id, FS: n.disk.FS(), NodeID: n.id, RaftAddr: n.id, Peers: boot, Join: n.join, Logger: c.log,
		ElectionTimeout: electionTimeout, HeartbeatTimeout: heartbeatTimeout, LeaderLeaseTimeout: heartbeatTimeout,
		SnapshotThreshold: w.cfg.SnapshotThreshold, TrailingLogs: w.cfg.TrailingLogs, WALSegmentSize: w.cfg.SegmentSize,
		Hooks: node.Hooks{Restored: svc.Restored}, AsyncLogWrites: w.async,
	}, svc.FSM(), etcd.SteppedConfig{
		Send:    func(ms []etcd.Message) { c.send(n, inc, ms) },
		Post:    w.post,
		Seed:    w.draw("ids:"+n.id, uint64(inc)).Uint64(),
		Applied: func(restored uint64, ents []etcd.Entry) { w.hist.Applied(n.id, inc, restored, ents) },
	})
	if err != nil {
		svc.Close()
		return err
	}
	guard := auth.NewGuard(svc, c.log)
	api := httpapi.New(httpapi.Config{Service: svc, Guard: guard, Logger: c.log})
	c.mu.Lock()
	n.inc, n.st, n.svc, n.guard, n.api, n.down, n.frozen = inc, st, svc, guard, api, false, false
	c.mu.Unlock()
	n.held, n.tickOwed, n.halted, n.leading, n.term = nil, false, false, false, 0
	n.writeDue, n.writes = false, 0
	svc.Start(view{Stepped: st, w: w})
	phase := time.Duration(w.draw("tick:"+n.id, uint64(inc)).Int64N(int64(tickEvery)))
	w.at(phase, func() { n.tick(inc) })
	w.at(n.snapPause(inc, 0), func() { n.snapshot(inc, 1) })
	return nil
}

// restart starts n (why: for the trace), and answers why it would not.
func (n *simNode) restart(why string) error {
	w := n.c.w
	prev := n.st
	flips := n.disk.Stats().Flipped
	err := n.start()
	n.flipped = n.disk.Stats().Flipped > flips
	if err != nil {
		w.tracef("w", "%s refuses to start (%s): %v", n.id, why, err)
		return err
	}
	w.tracef("w", "%s starts (%s), incarnation %d", n.id, why, n.inc)
	if c := n.st.Ceiling(); c < n.topToken && !n.floorOff && !n.disk.Damaged() {
		w.violate("w", "%s started with a token ceiling of %d, below token %d it applied before", n.id, c, n.topToken)
	}
	if prev != nil {
		n.checkLog(prev)
	}
	n.c.noteQuorum()
	return nil
}

// working says whether n runs and reaches every other node both ways.
func (c *cluster) working(n *simNode) bool {
	if n.down || n.frozen || n.halted {
		return false
	}
	for _, o := range c.all() {
		if o != n && (c.isCut(n, o) || c.isCut(o, n)) {
			return false
		}
	}
	return true
}

// noteQuorum records when fewer than a majority of the nodes can work
// together, and when a majority can again: an outage, in which the
// design keeps no lease.
func (c *cluster) noteQuorum() {
	up := 0
	voters := c.votersAt(^uint64(0))
	for _, n := range voters {
		if c.working(n) {
			up++
		}
	}
	w := c.w
	switch out := up*2 <= len(voters); {
	case out && !c.outage:
		c.outage = true
		w.mu.Lock()
		w.outages = append(w.outages, simcheck.Interval{Start: time.Now()})
		w.mu.Unlock()
		w.tracef("w", "no majority of the nodes works together")
	case !out && c.outage:
		c.outage = false
		w.mu.Lock()
		w.outages[len(w.outages)-1].End = time.Now()
		w.mu.Unlock()
		w.tracef("w", "a majority of the nodes works together again")
	}
}

// checkLog checks that n started with every entry its previous process
// had written to its log (raft's in-memory log holds only what the
// engine wrote and synced): anything missing may have been acknowledged,
// and a node that lost it must refuse to start. (An entry a snapshot
// covers counts as held.) On a disk whose synced data rotted, or that
// returned a flipped bit as the node read its log at start, the node
// refuses damage it can prove was synced (a whole batch after it, the
// watermark, raft's hard state); rot in the last synced batch after the
// watermark reads exactly as a torn write, which raft-wal drops
// (RELIABILITY.md, "Damage after the watermark"): that is counted, not
// a violation.
func (n *simNode) checkLog(prev *etcd.Stepped) {
	w := n.c.w
	last := prev.LastIndex()
	lost := uint64(0) // the lowest index lost
	for i := last; i > 0; i-- {
		t, ok := prev.LogTerm(i)
		if !ok || t == 0 {
			break // compacted before: covered by its snapshot
		}
		if now, ok := n.st.LogTerm(i); !ok || now != t && now != 0 {
			lost = i
		}
	}
	switch {
	case lost == 0:
	case lost > n.disowned:
		w.tracef("w", "%s dropped entries %d..%d, which its last process was deleting", n.id, lost, last)
	case (n.disk.Damaged() || n.flipped) && lost > n.watermark:
		w.counts.RotUnseen++
		w.tracef("w", "%s lost entries %d..%d to damage read after its watermark %d", n.id, lost, last, n.watermark)
	default:
		w.violate("w", "%s started without entry %d its previous process had written (its log ends at %d; the state file's watermark: %d)",
			n.id, lost, n.st.LastIndex(), n.watermark)
	}
}

// current says whether inc is n's running incarnation.
func (n *simNode) current(inc int) bool { return n.inc == inc && !n.down }

// tick is one tick of n's raft clock (tickEvery on its own clock).
func (n *simNode) tick(inc int) {
	if !n.current(inc) {
		return
	}
	n.c.w.at(n.clk.Virtual(tickEvery), func() { n.tick(inc) })
	if n.frozen {
		n.tickOwed = true // a stopped process's ticker fires once when it runs again
		return
	}
	n.step(func() error { return n.st.Tick() })
}

// snapPause is how long after the k-th snapshot check n checks again:
// SnapshotEvery, jittered up to half again so members do not check at
// once.
func (n *simNode) snapPause(inc, k int) time.Duration {
	e := n.c.w.cfg.SnapshotEvery
	return e + time.Duration(n.c.w.draw(fmt.Sprintf("snap:%s:%d", n.id, inc), uint64(k)).Int64N(int64(e/2)))
}

// snapshot takes a snapshot if the threshold was applied since the last,
// as the production node's snapLoop does every interval.
func (n *simNode) snapshot(inc, k int) {
	if !n.current(inc) {
		return
	}
	n.c.w.at(n.snapPause(inc, k), func() { n.snapshot(inc, k+1) })
	if n.frozen {
		return
	}
	n.step(func() error { return n.st.SnapshotNow(false) })
}

// step runs one step of n's node (unless it halted) and looks at what
// came of it.
func (n *simNode) step(f func() error) {
	if n.halted {
		return
	}
	applied := n.st.Applied()
	last := uint64(0)
	if n.atAck != nil {
		last, n.sentAck = n.st.LastIndex(), false
	}
	err := f()
	w := n.c.w
	if err != nil && n.st.Halted() != nil {
		n.halted = true
		w.tracef("w", "%s halted: %v", n.id, err)
		w.counts.Halted++
		n.c.noteQuorum()
		if !n.disk.Faulty() && !n.disk.Damaged() {
			// (A disk the last power loss rotted counts as damaged.)
			w.violate("w", "%s halted on a disk that had no fault: %v", n.id, err)
		}
		// What a supervisor does: restart the process a while later.
		inc := n.inc
		w.at(time.Second+time.Duration(w.draw("halt:"+n.id, uint64(inc)).Int64N(int64(time.Second))), func() {
			if n.current(inc) {
				n.crash(false, disk.NoRot, "restarted after a halt")
				n.restartAfter("after a halt")
			}
		})
		return
	}
	if !n.writeDue && n.st.Unwritten() {
		n.scheduleWrite()
	}
	_, term, leading, commit := n.st.Raft()
	if w.debug {
		if st := n.st.RaftState(); st != n.state || term != n.term {
			w.tracef("w", "%s: %s, term %d, log %d", n.id, st, term, n.st.LastIndex())
			n.state = st
		}
	}
	if leading && (!n.leading || term != n.term) {
		w.tracef("w", "%s leads (term %d)", n.id, term)
		w.leaderElected(n)
	}
	n.leading, n.term = leading, term
	if leading {
		n.c.mu.Lock()
		n.c.leadSvc = n.svc
		n.c.mu.Unlock()
	}
	if leading && commit > n.c.audited {
		n.c.auditCommit(n, applied, commit)
	}
	if n.atAck != nil && n.sentAck && n.st.LastIndex() > last {
		w.at(0, n.fireAtAck)
	}
}

// fireAtAck kills the process crashAtAck armed, if it still is.
func (n *simNode) fireAtAck() {
	if f := n.atAck; f != nil {
		n.atAck = nil
		f()
	}
}

// scheduleWrite has n's process write what its engine queued for its
// disk (asynchronous writes) after a delay drawn for it, as its writer
// goroutine does while raft runs on; a stopped process writes once it
// runs again.
func (n *simNode) scheduleWrite() {
	w := n.c.w
	inc := n.inc
	n.writeDue = true
	n.writes++
	r := w.draw(fmt.Sprintf("write:%s:%d", n.id, inc), n.writes)
	d := 20*time.Microsecond + time.Duration(r.Int64N(int64(time.Millisecond)))
	if r.IntN(50) == 0 {
		d = 2*time.Millisecond + time.Duration(r.Int64N(int64(20*time.Millisecond))) // a slow sync
	}
	run := func() {
		if !n.current(inc) {
			return
		}
		n.writeDue = false
		n.step(n.st.Write)
	}
	w.at(d, func() {
		if n.frozen && n.current(inc) {
			n.held = append(n.held, run)
			return
		}
		run()
	})
}

// auditCommit checks the entries the leader n committed in its last step
// (after the audited ones, up to commit) against the voters' logs: each
// must be held, of its term, by a majority of the voters of a
// configuration the committed log gives as of an index from what n had
// applied before the step to the entry before it. Raft takes a change up
// once it is committed, before the state machine applies it, so one step
// may commit a change and then the next entry under it. A down voter
// counts with the log its last process left.
func (c *cluster) auditCommit(n *simNode, applied, commit uint64) {
	// The changes n committed after what it had applied.
	var later []etcd.Entry
	ents, _ := n.st.Committed(applied + 1)
	for _, e := range ents {
		if e.Index > applied && e.Conf && e.Member != 0 {
			later = append(later, e)
		}
	}
	for i := c.audited + 1; i <= commit; i++ {
		term, ok := n.st.LogTerm(i)
		if !ok {
			c.w.violate("w", "%s committed entry %d beyond its own log", n.id, i)
			break
		}
		if term == 0 {
			continue // compacted: a snapshot holds it
		}
		var (
			voters, holders []string
			held            bool
		)
		at := min(i-1, applied)
		for k := 0; k <= len(later) && (k == 0 || later[k-1].Index < i); k++ {
			voters, holders = c.holders(c.votersAt(at, later[:k]...), i, term)
			if len(holders)*2 > len(voters) {
				held = true
				break
			}
		}
		if !held {
			c.w.violate("w", "%s committed entry %d (term %d) held by %d of the %d voters of its configuration (%v)",
				n.id, i, term, len(holders), len(voters), holders)
		}
	}
	c.audited = max(c.audited, commit)
}

// holders are the voters (by id) and those of them that hold entry i of
// term.
func (c *cluster) holders(voters []*simNode, i, term uint64) (ids, have []string) {
	for _, v := range voters {
		ids = append(ids, v.id)
		if v.st == nil {
			continue
		}
		if t, ok := v.st.LogTerm(i); ok && (t == term || t == 0) {
			have = append(have, v.id)
		}
	}
	return ids, have
}

// runPending runs the first node (in the cluster's order) that another
// goroutine asked something of; false when none was.
func (c *cluster) runPending() bool {
	for _, n := range c.nodes {
		if !n.down && !n.frozen && !n.halted && n.st.Pending() {
			n.step(n.st.Run)
			return true
		}
	}
	return false
}

// leaderElected runs as n becomes leader.
func (w *world) leaderElected(n *simNode) {
	w.mu.Lock()
	w.elections++
	w.elected = append(w.elected, time.Now())
	elections := w.elections
	w.mu.Unlock()
	if w.cfg.FastLeader > 0 && elections > 1 {
		n.clk.SetRate(1 + w.cfg.FastLeader)
	}
}

// send carries the messages n's incarnation inc sends: each arrives
// after a delay of its link's, in the order it was sent on that link,
// unless the link is cut or the receiver is down (the sender is told it
// could not reach it, as its transport is).
func (c *cluster) send(from *simNode, inc int, msgs []etcd.Message) {
	w := c.w
	for _, m := range msgs {
		to := c.byID[m.To()]
		if to == nil || to == from {
			continue
		}
		l := link{from.id, to.id}
		c.sent[l]++
		if from.atAck != nil && m.Kind() == "MsgAppResp" {
			from.sentAck = true
		}
		c.mu.Lock()
		cut, down, toInc := c.cut[l], to.down, to.inc
		c.mu.Unlock()
		switch {
		case cut:
			if m.Snapshot() {
				w.at(etcdDialTimeout, func() { from.report(inc, to.mid, true, false) })
			}
			continue
		case down:
			w.at(time.Millisecond, func() { from.report(inc, to.mid, m.Snapshot(), false) })
			continue
		}
		r := w.draw("link:"+l.from+">"+l.to, c.sent[l])
		d := 50*time.Microsecond + time.Duration(r.Int64N(int64(time.Millisecond)))
		if r.IntN(50) == 0 {
			d = 5*time.Millisecond + time.Duration(r.Int64N(int64(25*time.Millisecond)))
		}
		at := time.Now().Add(d)
		if last := c.lastAt[l]; !at.After(last) {
			at = last.Add(time.Nanosecond)
		}
		c.lastAt[l] = at
		w.at(time.Until(at), func() { c.deliver(from, inc, to, toInc, m) })
	}
}

// etcdDialTimeout is how long the transport takes to give up on a peer
// it cannot reach (etcdMinIOTimeout).
const etcdDialTimeout = 500 * time.Millisecond

// deliver hands m to to's incarnation toInc, if it still runs and the
// link still passes; a stopped process takes it when it runs again.
func (c *cluster) deliver(from *simNode, inc int, to *simNode, toInc int, m etcd.Message) {
	c.mu.Lock()
	cut := c.cut[link{from.id, to.id}]
	c.mu.Unlock()
	if !to.current(toInc) || cut {
		if m.Snapshot() {
			from.report(inc, to.mid, true, false)
		}
		return
	}
	run := func() {
		if !to.current(toInc) {
			return
		}
		to.step(func() error { return to.st.Step(m) })
		if m.Snapshot() {
			c.w.at(0, func() { from.report(inc, to.mid, true, true) })
		}
	}
	if to.frozen {
		to.held = append(to.held, run)
		return
	}
	run()
}

// report tells n's incarnation inc what its transport learned of peer:
// a snapshot sent (done or not), or that it could not reach it.
func (n *simNode) report(inc int, peer uint64, snap, done bool) {
	if !n.current(inc) {
		return
	}
	f := func() {
		if !n.current(inc) {
			return
		}
		if snap {
			n.step(func() error { return n.st.ReportSnapshot(peer, done) })
		} else {
			n.step(func() error { return n.st.ReportUnreachable(peer) })
		}
	}
	if n.frozen {
		n.held = append(n.held, f)
		return
	}
	f()
}

// crash ends n's running process: its node stops without closing
// anything cleanly (power: the machine loses power, and what the disk
// had not synced is lost as the disk's model says; rot: a bit of synced
// data rots too); its service winds down behind it.
func (n *simNode) crash(power bool, rot disk.Rot, why string) {
	c, w := n.c, n.c.w
	c.mu.Lock()
	if n.down {
		c.mu.Unlock()
		return
	}
	st, svc, guard, frozen := n.st, n.svc, n.guard, n.frozen
	n.down, n.frozen, n.api = true, false, nil
	c.mu.Unlock()
	if frozen {
		n.clk.Resume()
	}
	n.held = nil
	n.topToken = max(n.topToken, svc.FSM().LastToken())
	n.disowned = st.Durable()
	n.floorOff = n.floorOff || n.disk.Faulty()
	w.tracef("w", "%s crashes (%s): %s", n.id, why, n.disk.Crash(power, rot))
	n.watermark, _ = node.DurableIndex(n.disk.FS(), "/"+n.id)
	c.noteQuorum()
	_ = st.Close() // every handle is dead: what it writes goes nowhere
	svc.BeginShutdown()
	c.closers.Add(1)
	go func() { defer c.closers.Done(); svc.Close(); guard.Close() }()
}

// freeze stops n's process (SIGSTOP); thaw runs it again, and what
// arrived meanwhile.
func (n *simNode) freeze() {
	c := n.c
	c.mu.Lock()
	if n.down || n.frozen {
		c.mu.Unlock()
		return
	}
	n.frozen = true
	c.mu.Unlock()
	n.clk.Pause()
	c.w.tracef("w", "%s frozen", n.id)
	c.noteQuorum()
}

func (n *simNode) thaw() {
	c := n.c
	c.mu.Lock()
	if !n.frozen {
		c.mu.Unlock()
		return
	}
	n.frozen = false
	c.mu.Unlock()
	c.w.tracef("w", "%s thawed", n.id)
	n.clk.Resume()
	c.noteQuorum()
	held := n.held
	n.held = nil
	for _, f := range held {
		f()
	}
	if n.tickOwed && !n.down {
		n.tickOwed = false
		n.step(func() error { return n.st.Tick() })
	}
}

// setCut cuts (or heals) the link from a to b.
func (c *cluster) setCut(a, b *simNode, cut bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cut[link{a.id, b.id}] = cut
}

// isCut says whether the link from a to b passes nothing now.
func (c *cluster) isCut(a, b *simNode) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cut[link{a.id, b.id}]
}

// leader is the node that leads now by raft's own account (the last one
// to say so, if two do), or nil.
func (c *cluster) leader() *simNode {
	var best *simNode
	for _, n := range c.nodes {
		if !n.down && n.leading && (best == nil || n.term > best.term) {
			best = n
		}
	}
	return best
}

// operate makes an operator's call on the leader's service, asking
// again (after a pause) while it fails, as the CLI's user would.
func (c *cluster) operate(call func(context.Context, *service.Service) error) error {
	var err error
	for range 12 {
		c.mu.Lock()
		svc := c.leadSvc
		c.mu.Unlock()
		if svc != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err = call(ctx, svc)
			cancel()
			if err == nil {
				return nil
			}
		}
		time.Sleep(300 * time.Millisecond)
	}
	return err
}

// shutdown stops every node and service at the end of the world.
func (c *cluster) shutdown() {
	for _, n := range c.nodes {
		c.mu.Lock()
		st, svc, guard, down, frozen := n.st, n.svc, n.guard, n.down, n.frozen
		n.down = true
		c.mu.Unlock()
		if frozen {
			n.clk.Resume()
		}
		if down {
			continue
		}
		_ = st.Close()
		svc.BeginShutdown()
		svc.Close()
		guard.Close()
	}
	c.closers.Wait()
}

// view is the node as its service sees it: each call that asks the node
// something wakes the world's loop first, which settles (letting the
// call reach the node and wait) before it looks.
type view struct {
	*etcd.Stepped
	w *world
}

var _ replica.Replicator = view{}

func (v view) Propose(data []byte, timeout time.Duration) (*fsm.Result, error) {
	v.w.kickLoop()
	return v.Stepped.Propose(data, timeout)
}

func (v view) Barrier(timeout time.Duration) error {
	v.w.kickLoop()
	return v.Stepped.Barrier(timeout)
}

func (v view) VerifyLeader() error {
	v.w.kickLoop()
	return v.Stepped.VerifyLeader()
}

func (v view) AddNonvoter(id, addr string, timeout time.Duration) error {
	v.w.kickLoop()
	return v.Stepped.AddNonvoter(id, addr, timeout)
}

func (v view) AddVoter(id, addr string, timeout time.Duration) error {
	v.w.kickLoop()
	return v.Stepped.AddVoter(id, addr, timeout)
}

func (v view) RemoveServer(id string, timeout time.Duration) error {
	v.w.kickLoop()
	return v.Stepped.RemoveServer(id, timeout)
}

func (v view) TransferLeadership() error {
	v.w.kickLoop()
	return v.Stepped.TransferLeadership()
}
