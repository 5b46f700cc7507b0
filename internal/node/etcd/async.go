package etcd

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	etcdraft "go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/fencelock/fencelock/internal/node/etcd/etcdcodec"
	"github.com/fencelock/fencelock/internal/plant"
)

// Asynchronous log writes (issue 45; node.Config.AsyncLogWrites). raft
// (etcdraft.Config.AsyncStorageWrites) then hands over its local writes
// as messages instead of a Ready's Entries, HardState and Snapshot: a
// MsgStorageAppend to write (entries, the hard state, a leader's
// snapshot), carrying the messages to deliver once it is durable — this
// node's answers to appends and votes, and raft's own note that the
// entries are stable — and a MsgStorageApply of committed entries, every
// one of them durable here already. raft's goroutine sends the rest at
// once: none of it promises anything about this node's disk (a leader's
// appends and heartbeats, a candidate's requests for votes).
//
// A writer goroutine (writeLoop) takes the appends in order, all those
// waiting in one write and one sync, then delivers their answers: to the
// peers directly, to raft through writes.local, which raft's goroutine
// steps. So nothing is answered to a client before a quorum holds its
// entry durably (raft counts this node's own acknowledgement only once
// the writer delivers it, and hands over for applying only entries
// durable here), and term and vote are durable before any answer that
// depends on them leaves (those answers are an append's responses).
//
// What must not race with a write — installing a leader's snapshot,
// compacting the log, recording the commit index before a configuration
// change — waits until the writer has written everything queued (flush)
// and then runs on raft's goroutine while the writer has nothing to do.
//
// A stepped node has no writer: its driver calls Stepped.Write when it
// chooses (the simulation: after its disk's delay), which does what the
// writer does, in the same order.

// etcdWrites is the writer's queue and what it answers raft.
type etcdWrites struct {
	mu   sync.Mutex
	q    []etcdWrite
	wake chan struct{} // 1-buffered: q has work
	// busy: the writer holds items it took (or its last write failed);
	// the writer alone sets it, as it takes.
	busy bool
	// local are the answers for raft itself, in order; localc is
	// signalled (1-buffered) when some wait.
	local  []*raftpb.Message
	localc chan struct{}
}

// etcdWrite is one item of the writer's queue: a MsgStorageAppend, or a
// marker (m nil) whose done is closed once everything before it is
// written.
type etcdWrite struct {
	m    *raftpb.Message
	done chan struct{}
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (w *etcdWrites) init() {
	w.wake = make(chan struct{}, 1)
	w.localc = make(chan struct{}, 1)
}

func (w *etcdWrites) push(it etcdWrite) {
	w.mu.Lock()
	w.q = append(w.q, it)
	w.mu.Unlock()
	signal(w.wake)
}

// take is the writer's: what is queued, in order; busy until it takes
// nothing.
func (w *etcdWrites) take() []etcdWrite {
	w.mu.Lock()
	defer w.mu.Unlock()
	q := w.q
	w.q = nil
	w.busy = len(q) > 0
	return q
}

// idle says whether everything queued so far is written: nothing
// queued, nothing held by the writer. Only raft's goroutine queues, so
// it stays so until that goroutine queues more.
func (w *etcdWrites) idle() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.q) == 0 && !w.busy
}

// pending says whether writes or answers for raft wait.
func (w *etcdWrites) pending() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.q)+len(w.local) > 0
}

// writeLoop is the writer goroutine: it writes what raft's goroutine
// queues, until the core stops or a write fails (the node halts:
// nothing more may be acknowledged from it).
func (c *core) writeLoop() {
	for {
		select {
		case <-c.stop:
			return
		case <-c.writes.wake:
		}
		for q := c.writes.take(); len(q) > 0; q = c.writes.take() {
			if err := c.writeAll(q); err != nil {
				c.halt(fmt.Errorf("persisting raft state failed: %w", err))
				return // busy for good: nothing is taken for written
			}
		}
	}
}

// writeAll writes the appends of q as one, then delivers their answers
// and ends the markers' waits.
func (c *core) writeAll(q []etcdWrite) error {
	msgs := make([]*raftpb.Message, 0, len(q))
	for _, it := range q {
		if it.m != nil {
			msgs = append(msgs, it.m)
		}
	}
	if err := c.writeAppends(msgs); err != nil {
		return err
	}
	c.answerWritten(msgs)
	for _, it := range q {
		if it.done != nil {
			close(it.done)
		}
	}
	return nil
}

// writeAppends writes what msgs (MsgStorageAppend, in order, without a
// snapshot) carry: their entries as one append and one sync (a later
// one replacing the end of an earlier one, as raft replaces a log's
// end), then the last hard state among them when its term or vote
// moved (the commit index alone may lag: see etcdHardStateKey).
func (c *core) writeAppends(msgs []*raftpb.Message) error {
	var ents []*raftpb.Entry
	var hs *raftpb.HardState
	for _, m := range msgs {
		ents = etcdJoinEntries(ents, m.GetEntries())
		if m.Term != nil {
			hs = &raftpb.HardState{Term: m.Term, Vote: m.Vote, Commit: m.Commit}
		}
	}
	onDisk := ents
	if plant.On("ack-before-fsync") {
		// written a batch late: what this one answers acknowledges
		// entries not yet on disk
		onDisk, c.plantLate = c.plantLate, ents
	}
	if err := etcdcodec.Append(c.logs, onDisk); err != nil {
		return err
	}
	if err := c.ms.Append(ents); err != nil {
		return err
	}
	if hs == nil {
		return nil
	}
	if hs.GetTerm() != c.hs.GetTerm() || hs.GetVote() != c.hs.GetVote() {
		if !plant.On("vote-not-durable") {
			if err := etcdcodec.SaveHardState(c.stable, hs); err != nil {
				return err
			}
		}
		c.hs = hs
	}
	return c.ms.SetHardState(hs)
}

// nothingToWrite says whether the append m carries nothing the disk
// lacks once everything queued before it is written: no entries, no
// snapshot, and no term or vote other than those written (the commit
// index alone may lag on disk). Only with the writer idle: c.hs is the
// writer's.
func (c *core) nothingToWrite(m *raftpb.Message) bool {
	return len(m.GetEntries()) == 0 && etcdraft.IsEmptySnap(m.GetSnapshot()) &&
		(m.Term == nil || m.GetTerm() == c.hs.GetTerm() && m.GetVote() == c.hs.GetVote())
}

// etcdJoinEntries appends next to ents, next replacing the entries of
// ents from its first index on.
func etcdJoinEntries(ents, next []*raftpb.Entry) []*raftpb.Entry {
	if len(next) == 0 {
		return ents
	}
	if len(ents) == 0 {
		return next
	}
	first := next[0].GetIndex()
	switch base := ents[0].GetIndex(); {
	case first <= base:
		return next
	case first <= base+uint64(len(ents)):
		// A copy: ents may be raft's own slice.
		return slices.Concat(ents[:first-base], next)
	}
	return slices.Concat(ents, next) // not raft's: a gap is refused by the log
}

// answerWritten delivers the answers msgs carry, now that they are
// durable: raft's own to raft's goroutine, the rest to the peers.
func (c *core) answerWritten(msgs []*raftpb.Message) {
	var out, local []*raftpb.Message
	for _, m := range msgs {
		for _, r := range m.GetResponses() {
			if r.GetTo() == c.self {
				local = append(local, r)
			} else {
				out = append(out, r)
			}
		}
	}
	if len(out) > 0 {
		if send := c.send.Load(); send != nil {
			(*send)(out)
		}
	}
	if len(local) > 0 {
		w := &c.writes
		w.mu.Lock()
		w.local = append(w.local, local...)
		w.mu.Unlock()
		signal(w.localc)
	}
}

// stepLocal hands raft the answers the writer left for it.
func (c *core) stepLocal() {
	w := &c.writes
	w.mu.Lock()
	local := w.local
	w.local = nil
	w.mu.Unlock()
	for _, m := range local {
		_ = c.rn.Step(m) // raft drops an answer from an older term itself
	}
}

// flush waits until everything queued for the writer is written (a
// stepped core writes it here); the writer then has nothing to do until
// raft's goroutine queues more. Without asynchronous writes, nothing
// is queued.
func (c *core) flush() error {
	if !c.async {
		return nil
	}
	if c.stepped {
		return c.writeStepped()
	}
	done := make(chan struct{})
	c.writes.push(etcdWrite{done: done})
	select {
	case <-done:
		return nil
	case <-c.dead:
		return c.halted()
	case <-c.stop:
		return errors.New("shutting down")
	}
}

// writeStepped is a stepped core's turn of the writer: everything
// queued, written at once.
func (c *core) writeStepped() error {
	q := c.writes.take()
	if len(q) == 0 {
		return nil
	}
	if err := c.writeAll(q); err != nil {
		return err // busy for good, as the writer goroutine stays
	}
	c.writes.take() // nothing: not busy
	return nil
}

// saveCommit records the commit index raft last gave, when it is ahead
// of the one stored (applyConfChanges), once the writer has written
// everything queued: the hard state is raft's goroutine's meanwhile.
// Its term and vote may be ahead of what the queue held; recording them
// earlier than their answers leave is no harm.
func (c *core) saveCommit() error {
	if err := c.flush(); err != nil {
		return err
	}
	if c.cur == nil || c.cur.GetCommit() <= c.hs.GetCommit() {
		return nil
	}
	if err := etcdcodec.SaveHardState(c.stable, c.cur); err != nil {
		return err
	}
	c.hs = c.cur
	return nil
}

// readyAsync handles a Ready with asynchronous writes: it notes the
// roles, installs a leader's snapshot (after everything queued, here),
// applies the committed configuration changes, sends what needs no
// write, queues the write, and hands the committed entries over for
// applying.
func (c *core) readyAsync() error {
	rd := c.rn.Ready()
	became := c.roles(rd, c.cur)
	var app, apply *raftpb.Message
	var out []*raftpb.Message
	for _, m := range rd.Messages {
		switch m.GetTo() {
		case etcdraft.LocalAppendThread:
			app = m
		case etcdraft.LocalApplyThread:
			apply = m
		default:
			out = append(out, m)
		}
	}
	if hs := rd.HardState; !etcdraft.IsEmptyHardState(hs) {
		c.cur = hs
		c.commit.Store(hs.GetCommit())
		c.term.Store(hs.GetTerm())
	}
	if !etcdraft.IsEmptySnap(rd.Snapshot) {
		c.lastGiven = rd.Snapshot.GetMetadata().GetIndex()
	}
	if n := len(rd.Entries); n > 0 {
		c.lastGiven = rd.Entries[n-1].GetIndex()
	}
	if became {
		// raft refuses a change until it has applied this far
		// (pendingConfIndex: its log's last index then).
		c.leadStart = c.lastGiven
	}
	var inst *etcdInstall
	if app != nil && !etcdraft.IsEmptySnap(app.GetSnapshot()) {
		// The snapshot replaces the log: after everything queued,
		// durable before the entries after it and before anything is
		// acknowledged, as without asynchronous writes.
		if err := c.flush(); err != nil {
			return err
		}
		var err error
		if inst, err = c.install(app.GetSnapshot()); err != nil {
			return err
		}
		if err := c.writeAll([]etcdWrite{{m: app}}); err != nil {
			return err
		}
		app = nil
	}
	committed := apply.GetEntries()
	// As without asynchronous writes (core.ready): a leader sends before
	// it applies the configuration changes committed (a member it
	// removes is still sent the commit of its removal), a follower after
	// (a node just joined knows where the members named in them listen).
	send := c.send.Load()
	if send != nil && len(out) > 0 && c.leader {
		c.watchSent(out)
		(*send)(out)
	}
	if err := c.applyConfChanges(committed); err != nil {
		return err
	}
	if send != nil && len(out) > 0 && !c.leader {
		c.watchSent(out)
		(*send)(out)
	}
	switch {
	case app == nil:
	case c.writes.idle() && c.nothingToWrite(app):
		// Everything before it is on disk and it adds nothing: its
		// answers go now, without a turn of the writer.
		if app.Term != nil {
			if err := c.ms.SetHardState(&raftpb.HardState{Term: app.Term, Vote: app.Vote, Commit: app.Commit}); err != nil {
				return err
			}
		}
		c.answerWritten([]*raftpb.Message{app})
	default:
		c.writes.push(etcdWrite{m: app})
	}
	if n := len(committed); n > 0 {
		c.handed = committed[n-1].GetIndex()
	}
	if plant.On("apply-uncommitted") {
		committed = c.plantEarly(committed, rd.Entries)
	}
	if err := c.handApply(committed, inst, rd.Snapshot.GetMetadata().GetTerm()); err != nil {
		return err
	}
	// Handed over is applied as far as raft is concerned, as Advance
	// says without asynchronous writes.
	for _, m := range apply.GetResponses() {
		_ = c.rn.Step(m)
	}
	return nil
}
