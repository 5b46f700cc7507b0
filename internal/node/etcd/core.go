package etcd

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	etcdraft "go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/node"
	"github.com/fencelock/fencelock/internal/node/etcd/etcdcodec"
	"github.com/fencelock/fencelock/internal/plant"
	"github.com/fencelock/fencelock/internal/replica"
)

// core drives an etcd RawNode, alone or with peers over the raft port
// (etcdport). One goroutine (run) owns the RawNode: it ticks, takes
// proposals in batches between Readys, persists each Ready (entries
// through the checked log, the hard state when term or vote moved), hands
// messages to send, and passes committed entries to a second goroutine
// (applyLoop) that applies them in batches to the machine — which raises
// the token ceiling before any result is answered — and answers their
// proposers. A third (snapLoop) writes out the snapshots the apply
// goroutine takes between batches; run then compacts the log behind
// them, and persists a snapshot from the leader (the Ready's) before the
// entries after it, handing it to the apply goroutine ahead of them.
//
// A proposal's entry carries an 8-byte id before the encoded command, so
// that the applier can answer the proposer that is waiting for it. An
// entry at or below the log's last index at open was proposed by an
// earlier run and answers nobody, whatever its id; ids also start at a
// seed the caller picks at random, so that an earlier run's entry that
// arrives later from another leader does not either.
type core struct {
	rn     *etcdraft.RawNode
	logs   raft.LogStore
	stable raft.StableStore
	ms     *etcdraft.MemoryStorage
	m      *node.Machine
	log    *slog.Logger
	send   atomic.Pointer[func([]*raftpb.Message)] // nil: a node alone
	// onConf is told each configuration run applies, after it is
	// stored in conf (the transport closes what it holds for a member
	// removed); nil: nobody listens.
	onConf atomic.Pointer[func(*raftpb.ConfState)]
	tick   time.Duration

	props chan etcdProp
	recv  chan *raftpb.Message
	// reports are what the transport learned of a peer: unreachable, or
	// a snapshot sent (or not); run hands them to raft.
	reports chan etcdReport
	applyc  chan etcdApply
	stop    chan struct{}
	done    sync.WaitGroup
	// dead is closed when raft's goroutine stopped on its own (a write
	// that failed, a panic inside raft); fault says why.
	dead     chan struct{}
	fault    atomic.Pointer[error]
	haltOnce sync.Once

	// Snapshots (etcd_snapshot.go): snapAsk are Snapshot's requests to
	// snapLoop, snapTake snapLoop's to the apply goroutine, compacts
	// snapLoop's to run once a snapshot is written.
	policy     etcdSnapPolicy
	snapIndex  atomic.Uint64 // the newest snapshot's index, taken or installed
	snapAsk    chan chan error
	snapWanted chan struct{} // 1-buffered: raft's storage wants a newer snapshot
	snapTake   chan etcdTake
	compacts   chan etcdCompact
	booted     etcdPoint // the snapshot the core opened on: where applying starts

	hs      *raftpb.HardState // the one last persisted
	first   uint64            // the log's last index at open: entries up to it answer nobody
	leader  bool
	lead    atomic.Bool // leader, for other goroutines
	seq     atomic.Uint64
	applied atomic.Uint64
	commit  atomic.Uint64

	// replayTo is the last command among the log's last entries at open
	// (etcdLastCommand): the end of a restart's replay.
	replayTo uint64

	self  uint64
	watch *node.PeerWatch // what the peers answered this node's appends and heartbeats

	// What other goroutines read of raft's state, set by run.
	state     atomic.Uint64 // etcdraft.StateType
	otherLead atomic.Uint64 // the last leader raft named that is not this node
	leadID    atomic.Uint64 // the leader raft names; 0: none
	lastLead  atomic.Uint64 // the last leader raft named
	term      atomic.Uint64
	contact   atomic.Int64 // unix nanoseconds of the last message from a leader
	conf      atomic.Pointer[raftpb.ConfState]
	// leaderCh holds the latest change of leadership (1-buffered; only
	// run sends, so a drain before the send never blocks it).
	leaderCh chan bool
	// reads are VerifyLeader's requests: a waiter's id, answered when
	// raft's ReadIndex confirms this node still leads.
	reads chan uint64
	// names gives each member id its node ID and address: the
	// configured ones, then those the configuration entries carry
	// (copied on write, by run and by the transport's learnName).
	names   atomic.Pointer[map[uint64]node.Peer]
	namesMu sync.Mutex // orders the copies on write

	// Membership changes, run's own: confs are the requests, queued
	// until raft takes a change (one at a time: raft silently drops a
	// change proposed while another may be unapplied).
	confs       chan etcdConfReq
	transfers   chan uint64 // TransferLeadership's waiters
	transfer    uint64      // the waiter of the transfer under way; 0: none
	queued      []etcdConfReq
	confPending uint64            // the waiter of this leader's change not yet applied; 0: none
	leadStart   uint64            // the last index when this node became leader
	handed      uint64            // the last committed index handed to the apply loop
	cur         *raftpb.HardState // the one last given to raft's storage

	mu      sync.Mutex
	waiters map[uint64]chan etcdAnswer

	// stepped: no goroutine of the core's own runs; whoever drives it
	// (stepped.go) is raft's goroutine and the apply goroutine at once.
	stepped bool
	// post runs a wake-up of a goroutine waiting on the core (an
	// answer, a change of leadership): at once (nil), or, stepped, when
	// the driver chooses, so that it decides the order goroutines run in.
	post func(func())
	// The apply goroutine's own: the point applied, and what stopped
	// applying for good.
	at          etcdPoint
	applyFailed error
	// onApply, when set, is told what each apply did, after it
	// (a stepped node's driver: SteppedConfig.Applied).
	onApply func(etcdApply)
	// plantLate: the entries a planted bug writes a Ready late;
	// plantTop: the last one another applies before it commits.
	plantLate []*raftpb.Entry
	plantTop  uint64
	// quiet counts the ticks since a leader's last message (run's own;
	// failover.go).
	quiet int

	// async: raft's local writes leave its goroutine (async.go), to the
	// writer's queue (writes); lastGiven is the index of the last entry
	// raft handed over to be written (its log's last index).
	async     bool
	writes    etcdWrites
	lastGiven uint64
}

type etcdProp struct {
	id   uint64
	data []byte
}

type etcdAnswer struct {
	res *fsm.Result
	err error
}

const etcdIDLen = 8

// start makes the core's channels and starts its goroutines.
func (c *core) start(seed uint64) {
	c.init(seed)
	c.done.Add(3)
	go func() { defer c.done.Done(); c.run() }()
	go func() { defer c.done.Done(); c.applyLoop() }()
	go func() { defer c.done.Done(); c.snapLoop() }()
	if c.async {
		c.done.Add(1)
		go func() { defer c.done.Done(); c.writeLoop() }()
	}
}

func (c *core) init(seed uint64) {
	c.props = make(chan etcdProp, 1024)
	c.recv = make(chan *raftpb.Message, 4096)
	c.reports = make(chan etcdReport, 256)
	c.applyc = make(chan etcdApply, 64)
	c.snapAsk = make(chan chan error)
	c.snapWanted = make(chan struct{}, 1)
	c.snapTake = make(chan etcdTake)
	c.compacts = make(chan etcdCompact)
	c.reads = make(chan uint64, 64)
	c.confs = make(chan etcdConfReq, 16)
	c.transfers = make(chan uint64, 4)
	c.leaderCh = make(chan bool, 1)
	c.stop = make(chan struct{})
	c.dead = make(chan struct{})
	c.waiters = map[uint64]chan etcdAnswer{}
	c.writes.init()
	c.seq.Store(seed)
	c.at = c.booted
}

// wake runs f, a wake-up of a waiting goroutine, through post.
func (c *core) wake(f func()) {
	if c.post == nil {
		f()
		return
	}
	c.post(f)
}

func (c *core) close() {
	close(c.stop)
	c.done.Wait()
	c.failAll(replica.ErrUnavailable)
}

// propose hands data to raft and waits for its entry to be applied here.
func (c *core) propose(data []byte, timeout time.Duration) (*fsm.Result, error) {
	return etcdCall(c, c.props, func(id uint64) etcdProp { return etcdProp{id: id, data: data} }, timeout, nil)
}

// deliver hands raft a message from a peer; when raft is behind by a
// whole buffer the message is dropped, which raft recovers from as from a
// lost packet.
func (c *core) deliver(m *raftpb.Message) {
	select {
	case c.recv <- m:
	default:
	}
}

// etcdReport is what a transport tells raft of a peer: that it could not
// be reached, or how a snapshot sent to it went (snap set).
type etcdReport struct {
	to         uint64
	snap, done bool // snap: a snapshot's outcome, done: it was sent
}

// reportUnreachable tells raft that a message to peer to was lost: raft
// then probes it instead of streaming appends into the void. Dropped
// when raft is behind by a whole buffer (the next loss reports again).
func (c *core) reportUnreachable(to uint64) {
	select {
	case c.reports <- etcdReport{to: to}:
	default:
	}
}

// reportSnapshot tells raft whether the snapshot it sent to peer to
// arrived. Unlike an unreachable peer it is not dropped: raft waits for
// it before it sends that peer anything else.
func (c *core) reportSnapshot(to uint64, done bool) {
	select {
	case c.reports <- etcdReport{to: to, snap: true, done: done}:
	case <-c.stop:
	case <-c.dead:
	}
}

// setSend sets where the messages raft sends go.
func (c *core) setSend(f func([]*raftpb.Message)) { c.send.Store(&f) }

// setOnConf sets who is told of each configuration applied.
func (c *core) setOnConf(f func(*raftpb.ConfState)) { c.onConf.Store(&f) }

// setConf makes cs the configuration, and says so to onConf.
func (c *core) setConf(cs *raftpb.ConfState) {
	c.conf.Store(cs)
	if f := c.onConf.Load(); f != nil {
		(*f)(cs)
	}
}

func (c *core) forget(id uint64) {
	c.mu.Lock()
	delete(c.waiters, id)
	c.mu.Unlock()
}

// answer ends id's wait, if anyone still waits for it.
func (c *core) answer(id uint64, a etcdAnswer) {
	c.mu.Lock()
	ch, ok := c.waiters[id]
	delete(c.waiters, id)
	c.mu.Unlock()
	if ok {
		c.wake(func() { ch <- a })
	}
}

func (c *core) failAll(err error) {
	c.mu.Lock()
	ws := c.waiters
	c.waiters = map[uint64]chan etcdAnswer{}
	c.mu.Unlock()
	for _, ch := range ws {
		c.wake(func() { ch <- etcdAnswer{err: err} })
	}
}

func (c *core) run() {
	t := time.NewTicker(c.tick)
	defer t.Stop()
	// With asynchronous writes the writer may halt the node: raft's
	// goroutine then stops too, as when its own write fails.
	var dead <-chan struct{}
	if c.async {
		dead = c.dead
	}
	defer close(c.applyc)
	defer func() {
		// raft panics on a broken invariant (and etcd's logger on
		// Panicf): this node stops serving instead of the process
		// ending or raft running on in a state it disowns.
		if p := recover(); p != nil {
			c.halt(fmt.Errorf("raft failed: %v", p))
			<-c.stop
		}
	}()
	for {
		select {
		case <-c.stop:
			return
		case <-dead:
			<-c.stop
			return
		case <-c.writes.localc:
			c.stepLocal()
		case <-t.C:
			c.tickRaft()
		case p := <-c.props:
			c.proposeBatch(p)
		case m := <-c.recv:
			c.step(m)
		case r := <-c.reports:
			c.report(r)
		case id := <-c.reads:
			c.readIndex(id)
		case q := <-c.confs:
			c.queued = append(c.queued, q)
		case id := <-c.transfers:
			c.transferLeader(id)
		case k := <-c.compacts:
			err := c.compacted(k)
			k.done <- err
			if err != nil {
				<-c.stop
				return
			}
		}
		if err := c.settle(); err != nil {
			<-c.stop
			return
		}
	}
}

// report hands raft what the transport learned of a peer.
func (c *core) report(r etcdReport) {
	switch {
	case !r.snap:
		c.rn.ReportUnreachable(r.to)
	case r.done:
		c.rn.ReportSnapshot(r.to, etcdraft.SnapshotFinish)
	default:
		c.rn.ReportSnapshot(r.to, etcdraft.SnapshotFailure)
	}
}

// compacted compacts the log behind a snapshot written out; a failure
// halts the node.
func (c *core) compacted(k etcdCompact) error {
	err := c.flush() // the log is not compacted under the writer
	if err == nil {
		err = c.compact(k)
	}
	if err != nil {
		c.halt(fmt.Errorf("compacting the log failed: %w", err))
	}
	return err
}

// settle takes what waits for raft (drain) and handles every Ready it
// makes; an error halted the node.
func (c *core) settle() error {
	c.drain()
	c.proposeConf()
	for {
		c.stepLocal()
		if !c.rn.HasReady() {
			break
		}
		ready := c.ready
		if c.async {
			ready = c.readyAsync
		}
		if err := ready(); err != nil {
			// The log cannot be written: nothing more may be
			// acknowledged from this node.
			err = fmt.Errorf("persisting raft state failed: %w", err)
			c.halt(err)
			return err
		}
		c.proposeConf()
	}
	return nil
}

// step hands raft a peer's message. A message raft refuses (from a
// removed node, an old term) changes nothing.
func (c *core) step(m *raftpb.Message) {
	if c.rn.Step(m) == nil {
		c.watchReceived(m)
	}
}

// etcdDrainMax bounds the messages and proposals one Ready gathers.
const etcdDrainMax = 4096

// drain steps the peers' messages and takes the proposals already
// waiting, so that one Ready, and one write of the log, covers them all:
// without it a follower wrote (and synced) its log once per append the
// leader sent, and fell behind a leader that sends one append per Ready.
func (c *core) drain() {
	if c.stepped {
		return // its driver takes what waits, when it chooses (Stepped.Run)
	}
	for range etcdDrainMax {
		select {
		case m := <-c.recv:
			c.step(m)
		case p := <-c.props:
			c.proposeBatch(p)
		default:
			return
		}
	}
}

// halt stops this node serving for good: every wait, now and later,
// fails with err. dead is closed before the waiters fail, so a wait
// registered after failAll sees it. The first halt's err is the one
// kept (raft's goroutine or the apply goroutine may halt).
func (c *core) halt(err error) {
	c.haltOnce.Do(func() {
		c.fault.Store(&err)
		close(c.dead)
		c.log.Error("etcd engine: stopping", "err", err)
	})
	c.failAll(fmt.Errorf("%w: %v", replica.ErrUnavailable, err))
}

// halted is the error of a wait on a halted core.
func (c *core) halted() error {
	if p := c.fault.Load(); p != nil {
		return fmt.Errorf("%w: %v", replica.ErrUnavailable, *p)
	}
	return replica.ErrUnavailable
}

// proposeBatch proposes p and every proposal already queued behind it.
func (c *core) proposeBatch(p etcdProp) {
	for {
		c.proposeOne(p)
		select {
		case p = <-c.props:
		default:
			return
		}
	}
}

func (c *core) proposeOne(p etcdProp) {
	// A proposer already answered (leadership lost while it was queued)
	// must not see its command take effect later.
	if !c.waiting(p.id) {
		return
	}
	b := make([]byte, etcdIDLen+len(p.data))
	binary.BigEndian.PutUint64(b, p.id)
	copy(b[etcdIDLen:], p.data)
	if err := c.rn.Propose(b); err != nil {
		c.answer(p.id, etcdAnswer{err: fmt.Errorf("%w: %v", replica.ErrNotLeader, err)})
	}
}

func (c *core) ready() error {
	rd := c.rn.Ready()
	became := c.roles(rd, c.hs)
	// The leader may send while its own entries are written (thesis
	// §10.2.1, allowed by etcd's Ready.Messages) as long as its term and
	// vote are already durable.
	early := c.leader && (etcdraft.IsEmptyHardState(rd.HardState) ||
		(rd.HardState.GetTerm() == c.hs.GetTerm() && rd.HardState.GetVote() == c.hs.GetVote()))
	send := c.send.Load()
	if early && send != nil {
		c.watchSent(rd.Messages)
		(*send)(rd.Messages)
	}
	// A snapshot from the leader replaces the log: durable before the
	// entries after it are written and anything is acknowledged.
	var inst *etcdInstall
	if !etcdraft.IsEmptySnap(rd.Snapshot) {
		var err error
		if inst, err = c.install(rd.Snapshot); err != nil {
			return err
		}
	}
	ents := rd.Entries
	if plant.On("ack-before-fsync") {
		// written a Ready late: what this one sends acknowledges
		// entries not yet on disk
		ents, c.plantLate = c.plantLate, ents
	}
	if err := etcdcodec.Append(c.logs, ents); err != nil {
		return err
	}
	if err := c.ms.Append(rd.Entries); err != nil {
		return err
	}
	if became {
		// raft refuses a change until it has applied this far
		// (pendingConfIndex).
		last, err := c.ms.LastIndex()
		if err != nil {
			return err
		}
		c.leadStart = last
	}
	if hs := rd.HardState; !etcdraft.IsEmptyHardState(hs) {
		if hs.GetTerm() != c.hs.GetTerm() || hs.GetVote() != c.hs.GetVote() {
			if !plant.On("vote-not-durable") {
				if err := etcdcodec.SaveHardState(c.stable, hs); err != nil {
					return err
				}
			}
			c.hs = hs
		}
		if err := c.ms.SetHardState(hs); err != nil {
			return err
		}
		c.cur = hs
		c.commit.Store(hs.GetCommit())
		c.term.Store(hs.GetTerm())
	}
	// Configuration changes are applied before a follower sends, so
	// that a node just joined knows where the members named in them
	// listen before it answers the leader.
	if err := c.applyConfChanges(rd.CommittedEntries); err != nil {
		return err
	}
	if !early && send != nil {
		c.watchSent(rd.Messages)
		(*send)(rd.Messages)
	}
	if n := len(rd.CommittedEntries); n > 0 {
		c.handed = rd.CommittedEntries[n-1].GetIndex()
	}
	committed := rd.CommittedEntries
	if plant.On("apply-uncommitted") {
		committed = c.plantEarly(committed, rd.Entries)
	}
	if err := c.handApply(committed, inst, rd.Snapshot.GetMetadata().GetTerm()); err != nil {
		return err
	}
	c.rn.Advance(rd)
	return nil
}

// roles notes what rd says of this node's role (was: the hard state
// before it) and answers the reads it confirms; became says it became
// leader, or leads again in a new term.
func (c *core) roles(rd etcdraft.Ready, was *raftpb.HardState) (became bool) {
	// A leader whose term moved lost leadership in between, even when
	// it leads again: what it had proposed may be gone.
	if hs := rd.HardState; c.leader && !etcdraft.IsEmptyHardState(hs) && hs.GetTerm() != was.GetTerm() {
		c.lostLeadership()
		if rd.SoftState == nil {
			// It leads again, in a new term, and raft reports no
			// change: a true again restarts the service's duties
			// of a new leader.
			c.notifyLeader(true)
			became = true
		}
	}
	if ss := rd.SoftState; ss != nil {
		lead := ss.RaftState == etcdraft.StateLeader
		if c.leader && !lead {
			c.lostLeadership()
		}
		became = became || lead && !c.leader
		c.state.Store(uint64(ss.RaftState))
		c.leadID.Store(ss.Lead)
		if ss.Lead != 0 {
			c.lastLead.Store(ss.Lead)
		}
		if ss.Lead != 0 && ss.Lead != c.self {
			c.otherLead.Store(ss.Lead)
		}
		if lead != c.leader {
			c.notifyLeader(lead)
		}
		c.leader = lead
		c.lead.Store(lead)
	}
	for _, rs := range rd.ReadStates {
		if len(rs.RequestCtx) == etcdIDLen {
			c.answer(binary.BigEndian.Uint64(rs.RequestCtx), etcdAnswer{})
		}
	}
	return became
}

// handApply hands the apply goroutine a snapshot installed (inst, of
// term snapTerm) and the committed entries after it, if any.
func (c *core) handApply(committed []*raftpb.Entry, inst *etcdInstall, snapTerm uint64) error {
	if len(committed) == 0 && inst == nil {
		return nil
	}
	a := etcdApply{snap: inst, ents: committed,
		at: etcdPoint{index: c.handed, cs: c.conf.Load(), names: *c.names.Load()}}
	if n := len(a.ents); n > 0 {
		a.at.term = a.ents[n-1].GetTerm()
	} else {
		a.at.term = snapTerm
	}
	if c.stepped {
		// Through post, as the driver orders wake-ups: applying wakes
		// the goroutines that wait on the state machine.
		c.wake(func() {
			select {
			case <-c.stop:
			default:
				c.apply(a)
			}
		})
		return nil
	}
	select {
	case c.applyc <- a:
		return nil
	case <-c.stop:
		return errors.New("shutting down")
	}
}

// plantEarly is a planted bug's apply: the entries just appended with
// the committed ones, each index once.
func (c *core) plantEarly(committed, appended []*raftpb.Entry) []*raftpb.Entry {
	var out []*raftpb.Entry
	for _, e := range append(slices.Clone(committed), appended...) {
		if e.GetIndex() > c.plantTop {
			out = append(out, e)
			c.plantTop = e.GetIndex()
		}
	}
	return out
}

// applyConfChanges applies the configuration entries among ents (all
// committed) to raft, after recording the commit index that covers them:
// a node restarted with a commit index behind a configuration it had
// applied would start in an older one, and could count a quorum the
// cluster no longer has.
func (c *core) applyConfChanges(ents []*raftpb.Entry) error {
	saved := false
	for _, e := range ents {
		var cc raftpb.ConfChangeI
		var ctx []byte
		switch e.GetType() {
		case raftpb.EntryConfChange:
			v1 := new(raftpb.ConfChange)
			if err := protoUnmarshal(e.GetData(), v1); err != nil {
				return fmt.Errorf("entry %d: %w", e.GetIndex(), err)
			}
			cc, ctx = v1, v1.GetContext()
		case raftpb.EntryConfChangeV2:
			v2 := new(raftpb.ConfChangeV2)
			if err := protoUnmarshal(e.GetData(), v2); err != nil {
				return fmt.Errorf("entry %d: %w", e.GetIndex(), err)
			}
			cc, ctx = v2, v2.GetContext()
		default:
			continue
		}
		if !saved {
			if err := c.saveCommit(); err != nil {
				return err
			}
			saved = true
		}
		wid, peer, named := etcdParseConfContext(ctx)
		if named {
			for _, ch := range cc.AsV2().GetChanges() {
				if ch.GetType() != raftpb.ConfChangeRemoveNode && ch.GetNodeId() == etcdcodec.ID(peer.ID) {
					c.setName(ch.GetNodeId(), peer)
				}
			}
		}
		var cs *raftpb.ConfState
		var err error
		if plant.On("removed-member-counted") && etcdRemoves(cc) {
			cs = c.conf.Load() // raft goes on counting the member removed
		} else {
			cs, err = etcdApplyConfChange(c.rn, cc)
		}
		if err != nil {
			return fmt.Errorf("entry %d: %w", e.GetIndex(), err)
		}
		c.setConf(cs)
		if wid != 0 && wid == c.confPending {
			c.confPending = 0
		}
		if wid != 0 && e.GetIndex() > c.first {
			c.answer(wid, etcdAnswer{res: &fsm.Result{Index: e.GetIndex()}})
		}
	}
	return nil
}

// etcdRemoves says whether cc removes a member (a planted bug's test).
func etcdRemoves(cc raftpb.ConfChangeI) bool {
	for _, ch := range cc.AsV2().GetChanges() {
		if ch.GetType() == raftpb.ConfChangeRemoveNode {
			return true
		}
	}
	return false
}

// etcdApplyConfChange is rn.ApplyConfChange, which panics on a change
// it cannot make; that becomes an error (the node stops).
func etcdApplyConfChange(rn *etcdraft.RawNode, cc raftpb.ConfChangeI) (cs *raftpb.ConfState, err error) {
	defer func() {
		if p := recover(); p != nil {
			cs, err = nil, fmt.Errorf("raft refused the configuration change %v: %v", cc, p)
		}
	}()
	return rn.ApplyConfChange(cc), nil
}

func (c *core) setName(id uint64, p node.Peer) {
	c.namesMu.Lock()
	defer c.namesMu.Unlock()
	c.storeName(id, p)
}

// storeName copies the names with id's set to p; namesMu is held.
func (c *core) storeName(id uint64, p node.Peer) {
	old := c.names.Load()
	next := make(map[uint64]node.Peer, len(*old)+1)
	for k, v := range *old {
		next[k] = v
	}
	next[id] = p
	c.names.Store(&next)
}

// learnName records where a member the log has not named yet listens,
// as a peer's hello says (transport): a node just started to be
// joined answers the leader before it has applied the configuration.
// What the configuration says is kept. Only a member of the
// configuration is learned, or, on a node with no configuration yet, at
// most etcdMaxLearned names: dialers cannot grow the table without bound.
func (c *core) learnName(id uint64, p node.Peer) {
	c.namesMu.Lock()
	defer c.namesMu.Unlock()
	names := *c.names.Load()
	if _, ok := names[id]; ok {
		return
	}
	member, empty := etcdcodec.InConf(c.conf.Load(), id)
	if member || empty && len(names) < etcdMaxLearned {
		c.storeName(id, p)
	}
}

// etcdMaxLearned bounds the names a node with no configuration learns
// from hellos.
const etcdMaxLearned = 64

// name is the member id's node ID and address, when known.
func (c *core) name(id uint64) (node.Peer, bool) {
	p, ok := (*c.names.Load())[id]
	return p, ok
}

// transferLeader starts handing leadership to the voter whose log is
// furthest along; id is answered once this node no longer leads (or
// fails with the timeout of its wait: raft gives up a transfer after an
// election timeout).
func (c *core) transferLeader(id uint64) {
	if !c.leader {
		c.answer(id, etcdAnswer{err: fmt.Errorf("%w: this node does not lead", replica.ErrNotLeader)})
		return
	}
	st := c.rn.Status()
	var to, match uint64
	for v := range st.Config.Voters.IDs() {
		if pr, ok := st.Progress[v]; ok && v != c.self && (to == 0 || pr.Match > match) {
			to, match = v, pr.Match
		}
	}
	if to == 0 {
		c.answer(id, etcdAnswer{err: errors.New("etcd: no other voter to hand leadership to")})
		return
	}
	if c.transfer != 0 {
		c.answer(c.transfer, etcdAnswer{err: fmt.Errorf("%w: another transfer was asked for", replica.ErrUnavailable)})
	}
	c.transfer = id
	c.rn.TransferLeader(to)
}

// transferLeadership hands leadership to another voter and waits, at
// most for timeout, until this node no longer leads.
func (c *core) transferLeadership(timeout time.Duration) error {
	_, err := etcdCall(c, c.transfers, func(id uint64) uint64 { return id }, timeout,
		fmt.Errorf("%w: leadership was not handed over within %v", replica.ErrUnavailable, timeout))
	return err
}

// etcdCall is every wait on raft's goroutine: it registers a waiter,
// hands raft the request req builds for it on ch, and waits for the
// answer. timeout bounds the handing over, and the answer too when late
// is what to answer then (nil: a proposal, which waits until raft
// answers it, as the hashicorp node's does). A core halted or closed
// answers ErrUnavailable.
func etcdCall[T any](c *core, ch chan<- T, req func(id uint64) T, timeout time.Duration, late error) (*fsm.Result, error) {
	id := c.seq.Add(1)
	ans := make(chan etcdAnswer, 1)
	c.mu.Lock()
	c.waiters[id] = ans
	c.mu.Unlock()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case ch <- req(id):
	case <-t.C:
		c.forget(id)
		return nil, fmt.Errorf("%w: raft did not take the request within %v", replica.ErrUnavailable, timeout)
	case <-c.stop:
		c.forget(id)
		return nil, fmt.Errorf("%w: shutting down", replica.ErrUnavailable)
	case <-c.dead:
		c.forget(id)
		return nil, c.halted()
	}
	var expired <-chan time.Time
	if late != nil {
		expired = t.C
	}
	select {
	case a := <-ans:
		return a.res, a.err
	case <-expired:
		c.forget(id)
		return nil, late
	case <-c.stop:
		return nil, fmt.Errorf("%w: shutting down", replica.ErrUnavailable)
	case <-c.dead:
		c.forget(id)
		return nil, c.halted()
	}
}

// etcdConfReq is one membership change: a single change, and the member
// it names.
type etcdConfReq struct {
	id   uint64 // the waiter
	typ  raftpb.ConfChangeType
	peer node.Peer
}

// changeConf proposes a single membership change and waits, at most for
// timeout, until this node has applied it.
func (c *core) changeConf(typ raftpb.ConfChangeType, p node.Peer, timeout time.Duration) error {
	_, err := etcdCall(c, c.confs, func(id uint64) etcdConfReq { return etcdConfReq{id: id, typ: typ, peer: p} }, timeout,
		fmt.Errorf("%w: the change was not applied within %v (it may still take effect)", replica.ErrUnavailable, timeout))
	return err
}

// proposeConf hands raft the first queued change once it can take one:
// this node leads, has applied up to where its leadership began, and has
// no change of its own unapplied.
func (c *core) proposeConf() {
	for len(c.queued) > 0 {
		q := c.queued[0]
		switch {
		case !c.waiting(q.id):
		case !c.leader:
			c.answer(q.id, etcdAnswer{err: fmt.Errorf("%w: this node does not lead", replica.ErrNotLeader)})
		case c.confPending != 0 || c.handed < c.leadStart:
			return
		default:
			c.proposeConfNow(q)
		}
		c.queued = c.queued[1:]
	}
}

func (c *core) proposeConfNow(q etcdConfReq) {
	target := etcdcodec.ID(q.peer.ID)
	if err := etcdCheckChange(c.conf.Load(), q.typ, target); err != nil {
		c.answer(q.id, etcdAnswer{err: err})
		return
	}
	cc := &raftpb.ConfChangeV2{
		Changes: []*raftpb.ConfChangeSingle{{Type: q.typ.Enum(), NodeId: proto.Uint64(target)}},
		Context: etcdConfContext(q.id, q.peer),
	}
	if err := c.rn.ProposeConfChange(cc); err != nil {
		c.answer(q.id, etcdAnswer{err: fmt.Errorf("%w: %v", replica.ErrNotLeader, err)})
		return
	}
	c.confPending = q.id
}

// etcdCheckChange refuses a change raft could not apply to cs (it would
// panic): one that leaves no voter.
func etcdCheckChange(cs *raftpb.ConfState, typ raftpb.ConfChangeType, target uint64) error {
	if typ == raftpb.ConfChangeAddNode {
		return nil
	}
	left := 0
	for _, v := range cs.GetVoters() {
		if v != target {
			left++
		}
	}
	if left == 0 {
		return errors.New("etcd: the change would leave the cluster without a voter")
	}
	return nil
}

// etcdConfContext is what a configuration entry carries besides the
// change: the id of the waiter to answer (0: nobody), and the member's
// node ID and raft address, which every node learns from the log.
func etcdConfContext(wid uint64, p node.Peer) []byte {
	b := make([]byte, etcdIDLen+2, etcdIDLen+2+len(p.ID)+len(p.RaftAddr))
	binary.BigEndian.PutUint64(b, wid)
	binary.BigEndian.PutUint16(b[etcdIDLen:], uint16(len(p.ID)))
	b = append(b, p.ID...)
	return append(b, p.RaftAddr...)
}

// etcdParseConfContext reads etcdConfContext; named is false for a
// context it did not write.
func etcdParseConfContext(b []byte) (wid uint64, p node.Peer, named bool) {
	if len(b) < etcdIDLen+2 {
		return 0, node.Peer{}, false
	}
	wid = binary.BigEndian.Uint64(b)
	n := int(binary.BigEndian.Uint16(b[etcdIDLen:]))
	rest := b[etcdIDLen+2:]
	if n == 0 || n > len(rest) {
		return wid, node.Peer{}, false
	}
	return wid, node.Peer{ID: string(rest[:n]), RaftAddr: string(rest[n:])}, true
}

// watchSent notes the appends and heartbeats about to go to peers, for
// their health (Peers).
func (c *core) watchSent(msgs []*raftpb.Message) {
	for _, m := range msgs {
		switch m.GetType() {
		case raftpb.MsgApp, raftpb.MsgHeartbeat:
			if p, ok := c.name(m.GetTo()); ok {
				c.watch.Sent(p.ID, m.GetTerm())
			}
		}
	}
}

// watchReceived notes what a message raft took says of its sender: a
// leader's contact, or a peer's answer to this leader.
func (c *core) watchReceived(m *raftpb.Message) {
	switch m.GetType() {
	case raftpb.MsgApp, raftpb.MsgHeartbeat, raftpb.MsgSnap: // only a leader sends these
		c.contact.Store(time.Now().UnixNano())
		c.heardLeader(m.GetTerm())
	case raftpb.MsgAppResp:
		if p, ok := c.name(m.GetFrom()); ok {
			if m.GetReject() {
				c.watch.Heard(p.ID, m.GetTerm())
			} else {
				c.watch.Answered(p.ID, m.GetTerm(), m.GetIndex())
			}
		}
	case raftpb.MsgHeartbeatResp:
		if p, ok := c.name(m.GetFrom()); ok {
			c.watch.Heard(p.ID, m.GetTerm())
		}
	case raftpb.MsgVoteResp, raftpb.MsgPreVoteResp: // a candidate hears from the voters only this way
		if p, ok := c.name(m.GetFrom()); ok {
			c.watch.Voted(p.ID)
		}
	}
}

// lostLeadership ends what waited on this node's leadership: a transfer
// is done (whoever leads now, this node does not), everything else fails.
func (c *core) lostLeadership() {
	if c.transfer != 0 {
		c.answer(c.transfer, etcdAnswer{})
		c.transfer = 0
	}
	c.failAll(fmt.Errorf("%w: leadership lost", replica.ErrNotLeader))
	c.confPending = 0
}

// notifyLeader leaves lead as the latest change on leaderCh.
func (c *core) notifyLeader(lead bool) {
	c.wake(func() {
		select {
		case <-c.leaderCh:
		default:
		}
		c.leaderCh <- lead
	})
}

// waiting says whether anyone still waits for id.
func (c *core) waiting(id uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.waiters[id]
	return ok
}

// readIndex asks raft to confirm with a quorum that this node leads,
// answering id when it does; a node that does not lead is answered at
// once. A leader that loses leadership before the quorum answers fails
// the wait with every other (ready).
func (c *core) readIndex(id uint64) {
	if !c.leader {
		c.answer(id, etcdAnswer{err: fmt.Errorf("%w: this node does not lead", replica.ErrNotLeader)})
		return
	}
	b := make([]byte, etcdIDLen)
	binary.BigEndian.PutUint64(b, id)
	c.rn.ReadIndex(b)
}

// verify waits, at most for timeout, until a quorum confirms that this
// node leads.
func (c *core) verify(timeout time.Duration) error {
	_, err := etcdCall(c, c.reads, func(id uint64) uint64 { return id }, timeout,
		fmt.Errorf("%w: no quorum confirmed this node's leadership within %v", replica.ErrNotLeader, timeout))
	return err
}

// applyLoop applies committed entries in batches and answers them, a
// snapshot installed from the leader first when one comes with them; and
// between two batches it takes the state machine's snapshot when
// snapLoop asks for one. A snapshot that cannot be restored halts the
// node: nothing after it can be applied.
func (c *core) applyLoop() {
	for {
		select {
		case a, ok := <-c.applyc:
			if !ok {
				return
			}
			c.apply(a)
		case req := <-c.snapTake:
			req.reply <- c.takeAt(req)
		}
	}
}

// apply restores a's snapshot, if any, then applies its entries.
func (c *core) apply(a etcdApply) {
	if c.applyFailed != nil {
		return
	}
	if a.snap != nil {
		if err := c.restore(a.snap); err != nil {
			c.applyFailed = err
			c.halt(err)
			return
		}
	}
	c.applyEntries(a.ents)
	c.at = a.at
	if c.onApply != nil {
		c.onApply(a)
	}
}

// takeAt is the state machine's snapshot at the point applied, unless
// applying stopped.
func (c *core) takeAt(req etcdTake) etcdTaken {
	if c.applyFailed != nil {
		return etcdTaken{err: c.halted()}
	}
	return c.take(c.at, req)
}

// applyEntries applies one batch of committed entries and answers them.
func (c *core) applyEntries(batch []*raftpb.Entry) {
	if len(batch) == 0 {
		return
	}
	// Sized once: a restart hands over thousands of entries a batch,
	// and growing these by appends was a tenth of its apply's time.
	ents := make([]fsm.Entry, 0, len(batch))
	ids := make([]uint64, 0, len(batch))
	for _, e := range batch {
		d := e.GetData()
		if e.GetType() != raftpb.EntryNormal || len(d) < etcdIDLen {
			continue
		}
		id := binary.BigEndian.Uint64(d)
		if e.GetIndex() <= c.first {
			id = 0 // proposed before this run: nobody waits for it
		}
		ids = append(ids, id)
		// A barrier carries no command: it is answered with its index.
		ents = append(ents, fsm.Entry{Index: e.GetIndex(), Term: e.GetTerm(), Data: d[etcdIDLen:], Unanswered: id == 0})
	}
	var out []fsm.Result
	if len(ents) > 0 {
		out = c.m.ApplyBatch(ents)
	}
	c.applied.Store(batch[len(batch)-1].GetIndex())
	floorErr := c.m.FloorErr()
	for i, id := range ids {
		if id == 0 {
			continue // nobody waits; and out is nil when nobody in the batch does
		}
		if floorErr != nil {
			c.answer(id, etcdAnswer{err: fmt.Errorf("%w: %w", replica.ErrUnavailable, floorErr)})
			continue
		}
		c.answer(id, etcdAnswer{res: &out[i]})
	}
}

// etcdNewRawNode is etcdraft.NewRawNode, which panics on a log it cannot
// start from; that becomes an error.
func etcdNewRawNode(cfg *etcdraft.Config) (rn *etcdraft.RawNode, err error) {
	defer func() {
		if p := recover(); p != nil {
			rn, err = nil, fmt.Errorf("raft refused the stored state: %v", p)
		}
	}()
	return etcdraft.NewRawNode(cfg)
}

// etcdBootConf is the configuration a core starts with, before it applies
// any configuration entry: the snapshot's, or the voters bootstrapped
// when the log was empty; the log's own entries replace it as they are
// applied again.
func etcdBootConf(ms *etcdraft.MemoryStorage, last uint64, voters []uint64) (*raftpb.ConfState, error) {
	_, cs, err := ms.InitialState()
	if err != nil {
		return nil, err
	}
	if last == 0 {
		return &raftpb.ConfState{Voters: voters}, nil
	}
	return cs, nil
}

// openCore starts a core over the stores (openStores' verified ones,
// or in memory): a node
// alone (voters is itself) when the stores hold no etcd state yet.
//
// names are the members' node IDs and addresses known before the log is
// read; voters empty: bootstrap nothing, this node waits to be added.
// The newest snapshot of the policy's store, if any, is restored into m
// first, and the log replays after it.
func openCore(logs raft.LogStore, stable raft.StableStore, m *node.Machine, self uint64, voters []uint64, names map[uint64]node.Peer, tick time.Duration, log *slog.Logger, seed uint64, policy etcdSnapPolicy) (*core, error) {
	c, err := newCore(logs, stable, m, self, voters, names, tick, log, policy, false)
	if err != nil {
		return nil, err
	}
	c.start(seed)
	return c, nil
}

// newCore is openCore without starting anything; async: raft's log
// writes leave its goroutine (async.go).
func newCore(logs raft.LogStore, stable raft.StableStore, m *node.Machine, self uint64, voters []uint64, names map[uint64]node.Peer, tick time.Duration, log *slog.Logger, policy etcdSnapPolicy, async bool) (*core, error) {
	if policy.store == nil {
		policy.store = raft.NewInmemSnapshotStore()
	}
	snap, snapNames, fsmData, err := etcdcodec.LoadSnap(policy.store)
	if err != nil {
		return nil, err
	}
	var booted etcdPoint
	if snap != nil {
		md := snap.GetMetadata()
		booted = etcdPoint{index: md.GetIndex(), term: md.GetTerm(), cs: md.GetConfState(), names: snapNames}
		if err := m.Restore(bytes.NewReader(fsmData)); err != nil {
			return nil, fmt.Errorf("restoring the snapshot at %d: %w", booted.index, err)
		}
	}
	if err := etcdDropStaleLog(logs, booted.index); err != nil {
		return nil, err
	}
	ms, err := etcdcodec.LoadMemory(logs, stable, snap)
	if err != nil {
		return nil, err
	}
	hs, _, err := ms.InitialState()
	if err != nil {
		return nil, err
	}
	storage := &etcdStorage{MemoryStorage: ms}
	rn, err := etcdNewRawNode(&etcdraft.Config{
		ID: self, ElectionTick: 10, HeartbeatTick: 1, Storage: storage,
		MaxSizePerMsg: 1 << 20, MaxInflightMsgs: 256, CheckQuorum: true, PreVote: true,
		DisableProposalForwarding: true, StepDownOnRemoval: true, Logger: etcdLogger{log},
		AsyncStorageWrites: async,
	})
	if err != nil {
		return nil, fmt.Errorf("starting raft: %w", err)
	}
	last, err := ms.LastIndex()
	if err != nil {
		return nil, err
	}
	if last == 0 && len(voters) > 0 {
		peers := make([]etcdraft.Peer, len(voters))
		for i, v := range voters {
			peers[i] = etcdraft.Peer{ID: v}
			if p, ok := names[v]; ok {
				peers[i].Context = etcdConfContext(0, p)
			}
		}
		if err := rn.Bootstrap(peers); err != nil {
			return nil, fmt.Errorf("bootstrap: %w", err)
		}
	}
	c := &core{rn: rn, logs: logs, stable: stable, ms: ms, m: m, log: log, tick: tick, hs: hs, cur: hs, first: last,
		self: self, watch: node.NewPeerWatch(time.Now), policy: policy, booted: booted, handed: booted.index,
		async: async, lastGiven: last}
	storage.c = c
	c.snapIndex.Store(booted.index)
	c.applied.Store(booted.index)
	c.term.Store(hs.GetTerm())
	c.contact.Store(time.Now().UnixNano())
	cs, err := etcdBootConf(ms, last, voters)
	if err != nil {
		return nil, err
	}
	c.conf.Store(cs)
	// The snapshot's names are the log's, later than the configured ones.
	known := make(map[uint64]node.Peer, len(names)+len(snapNames))
	for id, p := range names {
		known[id] = p
	}
	for id, p := range snapNames {
		known[id] = p
	}
	c.names.Store(&known)
	c.booted.names = known
	c.replayTo = etcdLastCommand(ms, booted.index, last)
	return c, nil
}

// etcdLastCommand is the index of the last entry that carries a command
// among the last 64 of ms after first up to last; 0: none.
func etcdLastCommand(ms *etcdraft.MemoryStorage, first, last uint64) uint64 {
	lo := max(first+1, last-min(last, 63))
	if last < lo {
		return 0
	}
	ents, err := ms.Entries(lo, last+1, math.MaxUint64)
	if err != nil {
		return 0
	}
	for i := len(ents) - 1; i >= 0; i-- {
		if e := ents[i]; e.GetType() == raftpb.EntryNormal && len(e.GetData()) > etcdIDLen {
			return e.GetIndex()
		}
	}
	return 0
}

func protoUnmarshal(b []byte, m proto.Message) error { return proto.Unmarshal(b, m) }
