package etcd

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/fencelock/fencelock/internal/node"
	"github.com/fencelock/fencelock/internal/node/etcd/etcdcodec"
	"github.com/fencelock/fencelock/internal/plant"
	"github.com/fencelock/fencelock/internal/replica"
	"github.com/hashicorp/raft"
	etcdraft "go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// The etcd engine's snapshots (issue 28). A snapshot is the state
// machine's own (machine.Snapshot, so the hooks and the memory signal
// stay those of the hashicorp node) at an applied index, with the raft
// configuration at that index and the names of its members. It is kept
// where the hashicorp node keeps its snapshots (the data dir's
// snapshots/, raft.FileSnapshotStore: a CRC-64 of the state, checked at
// open, so a damaged snapshot is refused like a damaged log), the
// configuration with the names in the store's metadata and the state
// machine's bytes as its contents.
//
// raft itself carries a snapshot (MemoryStorage's, and MsgSnap to a
// follower behind the leader's compaction) as raftpb.Snapshot: the
// configuration in its metadata, and as its data etcdEncodeSnap's
// encoding, which adds the members' names to the state machine's bytes.
//
// The apply goroutine takes the state machine's snapshot between two
// batches, so it is exactly the state at the batch's last index; another
// goroutine (snapLoop) writes it out, since writing is slow; then raft's
// goroutine records it in raft's storage and compacts the log, in memory
// and in the wal, keeping TrailingLogs entries for followers a little
// behind.

// errNothingNew answers a snapshot asked for when nothing was applied
// since the last one, as raft.ErrNothingNewToSnapshot does on Node.
var errNothingNew = errors.New("etcd: nothing new to snapshot")

// etcdSnapPolicy is when a core snapshots and where it keeps them.
type etcdSnapPolicy struct {
	store raft.SnapshotStore // nil: one in memory
	// threshold is how many applied entries since the last snapshot
	// make one worth taking; checked every interval (jittered), as the
	// hashicorp node checks its SnapshotThreshold.
	threshold uint64
	trailing  uint64        // log entries kept after a snapshot
	interval  time.Duration // 0: only when asked (Snapshot)
}

// etcdPolicy is the snapshot policy of cfg. A field left zero takes the
// default both engines share (node.DefaultSnapshotThreshold and
// node.DefaultSnapshotInterval; the server fills them all); TrailingLogs
// is taken as it is, 0 keeping no entry.
func etcdPolicy(cfg node.Config, store raft.SnapshotStore) etcdSnapPolicy {
	p := etcdSnapPolicy{store: store, threshold: cfg.SnapshotThreshold, trailing: cfg.TrailingLogs,
		interval: cfg.SnapshotInterval}
	if p.threshold == 0 {
		p.threshold = node.DefaultSnapshotThreshold
	}
	if p.interval <= 0 {
		p.interval = node.DefaultSnapshotInterval
	}
	return p
}

// etcdPoint is a place in the applied log: the last entry applied, and
// the configuration and names as of it.
type etcdPoint struct {
	index, term uint64
	cs          *raftpb.ConfState
	names       map[uint64]node.Peer
}

// etcdApply is what raft's goroutine hands the apply goroutine: a
// snapshot to restore first (a follower's, installed from the leader),
// then committed entries; at is the point after both.
type etcdApply struct {
	snap *etcdInstall
	ents []*raftpb.Entry
	at   etcdPoint
}

// etcdInstall is a snapshot raft's goroutine persisted for the apply
// goroutine to restore.
type etcdInstall struct {
	index   uint64
	fsmData []byte
}

// etcdTake asks the apply goroutine for the state machine's snapshot
// (force: whatever the threshold says).
type etcdTake struct {
	force bool
	reply chan etcdTaken // 1-buffered
}

// etcdTaken is the state machine's snapshot and where it was taken; fs
// nil: none (an error, or too little applied since the last one).
type etcdTaken struct {
	fs  *node.MachineSnapshot
	at  etcdPoint
	err error
}

// etcdCompact asks raft's goroutine to record a written snapshot in
// raft's storage and compact the log behind it.
type etcdCompact struct {
	at   etcdPoint
	data []byte // etcdEncodeSnap's
	done chan error
}

// etcdPeerCodec is the one thing of a transport a snapshot store asks
// for: how to record a voter in the metadata's legacy peer list.
type etcdPeerCodec struct{ raft.Transport }

func (etcdPeerCodec) EncodePeer(_ raft.ServerID, addr raft.ServerAddress) []byte { return []byte(addr) }

// etcdCreateSnap starts a snapshot at at in store, its configuration and
// names in the metadata; the state machine's bytes are written to the
// sink, whose Close makes it durable (FileSnapshotStore fsyncs).
func etcdCreateSnap(store raft.SnapshotStore, at etcdPoint) (raft.SnapshotSink, error) {
	conf, err := etcdcodec.Configuration(at.cs, at.names)
	if err != nil {
		return nil, fmt.Errorf("the configuration at %d: %w", at.index, err)
	}
	return store.Create(raft.SnapshotVersionMax, at.index, at.term, conf, at.index, etcdPeerCodec{})
}

// etcdTeeSink writes the state machine's snapshot to the store and to
// the copy raft keeps in memory to send to followers.
type etcdTeeSink struct {
	raft.SnapshotSink
	copy *bytes.Buffer
}

func (s *etcdTeeSink) Write(p []byte) (int, error) {
	n, err := s.SnapshotSink.Write(p)
	s.copy.Write(p[:n])
	return n, err
}

// snapshot takes a snapshot now (Snapshot: tests, operators), whatever
// the threshold says; errNothingNew when nothing was applied since the
// last one.
func (c *core) snapshot() error {
	ans := make(chan error, 1)
	select {
	case c.snapAsk <- ans:
	case <-c.stop:
		return fmt.Errorf("%w: shutting down", replica.ErrUnavailable)
	case <-c.dead:
		return c.halted()
	}
	select {
	case err := <-ans:
		return err
	case <-c.stop:
		return fmt.Errorf("%w: shutting down", replica.ErrUnavailable)
	case <-c.dead:
		return c.halted()
	}
}

// snapLoop takes the snapshots: when asked, when raft's storage wants
// one for a member the last one does not name (etcdStorage), and every
// interval (between one and two, so that members do not all write at
// once) once threshold entries were applied since the last one.
func (c *core) snapLoop() {
	var tick <-chan time.Time
	var t *time.Timer
	jitter := func() time.Duration {
		return c.policy.interval + rand.N(c.policy.interval)
	}
	if c.policy.interval > 0 {
		t = time.NewTimer(jitter())
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-c.stop:
			return
		case <-tick:
			if err := c.takeSnapshot(false); err != nil {
				c.log.Warn("etcd engine: taking a snapshot failed", "err", err)
			}
			t.Reset(jitter())
		case ans := <-c.snapAsk:
			ans <- c.takeSnapshot(true)
		case <-c.snapWanted:
			if err := c.takeSnapshot(true); err != nil && !errors.Is(err, errNothingNew) {
				c.log.Warn("etcd engine: taking a snapshot for a new member failed", "err", err)
			}
		}
	}
}

// takeSnapshot has the apply goroutine take the state machine's
// snapshot, writes it out here, then has raft's goroutine compact the
// log behind it.
func (c *core) takeSnapshot(force bool) error {
	stopped := func() error {
		select {
		case <-c.dead:
			return c.halted()
		default:
			return fmt.Errorf("%w: shutting down", replica.ErrUnavailable)
		}
	}
	reply := make(chan etcdTaken, 1)
	select {
	case c.snapTake <- etcdTake{force: force, reply: reply}:
	case <-c.stop:
		return stopped()
	}
	var tk etcdTaken
	select {
	case tk = <-reply:
	case <-c.stop:
		return stopped()
	}
	if tk.err != nil || tk.fs == nil {
		return tk.err
	}
	k, err := c.writeSnap(tk)
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	k.done = done
	select {
	case c.compacts <- k:
	case <-c.stop:
		return stopped()
	case <-c.dead:
		return c.halted()
	}
	select {
	case err := <-done:
		return err
	case <-c.stop:
		return stopped()
	case <-c.dead:
		return c.halted()
	}
}

// writeSnap writes the state machine's snapshot tk out to the store,
// and answers what raft's goroutine is to record and compact behind.
func (c *core) writeSnap(tk etcdTaken) (etcdCompact, error) {
	defer tk.fs.Release()
	head, err := etcdcodec.SnapHeader(tk.at.cs, tk.at.names)
	if err != nil {
		return etcdCompact{}, fmt.Errorf("the snapshot at %d: %w", tk.at.index, err)
	}
	sink, err := etcdCreateSnap(c.policy.store, tk.at)
	if err != nil {
		return etcdCompact{}, fmt.Errorf("creating the snapshot at %d: %w", tk.at.index, err)
	}
	buf := bytes.NewBuffer(head)
	if _, err := tk.fs.WriteTo(&etcdTeeSink{SnapshotSink: sink, copy: buf}); err != nil {
		sink.Cancel()
		return etcdCompact{}, fmt.Errorf("writing the snapshot at %d: %w", tk.at.index, err)
	}
	if err := sink.Close(); err != nil {
		return etcdCompact{}, fmt.Errorf("writing the snapshot at %d: %w", tk.at.index, err)
	}
	return etcdCompact{at: tk.at, data: buf.Bytes()}, nil
}

// take is the apply goroutine's part of a snapshot: the state machine's
// at at, the last point applied, unless too little was applied since the
// last snapshot.
func (c *core) take(at etcdPoint, req etcdTake) etcdTaken {
	since := at.index - min(at.index, c.snapIndex.Load())
	switch {
	case since == 0 && req.force:
		return etcdTaken{err: errNothingNew}
	case since == 0 || !req.force && since < c.policy.threshold:
		return etcdTaken{}
	}
	return etcdTaken{fs: c.m.Snapshot(), at: at}
}

// compact is raft's goroutine's part of a snapshot written out: raft's
// storage records it (what it sends a follower behind the log), then
// the log is compacted in memory and in the wal up to the snapshot, or
// to TrailingLogs entries before the log's end, whichever is lower (as
// on the hashicorp node). A snapshot older than one installed since is
// only kept on disk.
func (c *core) compact(k etcdCompact) error {
	_, err := c.ms.CreateSnapshot(k.at.index, k.at.cs, k.data)
	if errors.Is(err, etcdraft.ErrSnapOutOfDate) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("recording the snapshot at %d: %w", k.at.index, err)
	}
	c.snapIndex.Store(max(c.snapIndex.Load(), k.at.index))
	last, err := c.ms.LastIndex()
	if err != nil {
		return err
	}
	to := k.at.index
	if last < c.policy.trailing {
		return nil
	}
	to = min(to, last-c.policy.trailing)
	if first, err := c.ms.FirstIndex(); err == nil && to >= first {
		if err := c.ms.Compact(to); err != nil && !errors.Is(err, etcdraft.ErrCompacted) {
			return fmt.Errorf("compacting the log to %d: %w", to, err)
		}
	}
	first, err := c.logs.FirstIndex()
	if err != nil {
		return err
	}
	if first > 0 && first <= to {
		if err := c.logs.DeleteRange(first, to); err != nil {
			return fmt.Errorf("deleting the entries %d..%d a snapshot covers: %w", first, to, err)
		}
	}
	return nil
}

// install persists the snapshot raft hands a follower behind the
// leader's compaction, before anything acknowledges it: into the store,
// then the log it replaces is deleted (raft restarts the log after it)
// and raft's storage takes it. The apply goroutine restores the state
// machine from what install answers, before any entry after it.
func (c *core) install(s *raftpb.Snapshot) (*etcdInstall, error) {
	md := s.GetMetadata()
	at := etcdPoint{index: md.GetIndex(), term: md.GetTerm(), cs: md.GetConfState()}
	names, fsmData, err := etcdcodec.DecodeSnap(s.GetData())
	if err != nil {
		return nil, fmt.Errorf("the leader's snapshot at %d: %w", at.index, err)
	}
	known := make(map[uint64]node.Peer, len(*c.names.Load())+len(names))
	for id, p := range *c.names.Load() {
		known[id] = p
	}
	for id, p := range names {
		known[id] = p
	}
	at.names = known
	sink, err := etcdCreateSnap(c.policy.store, at)
	if err != nil {
		return nil, fmt.Errorf("storing the leader's snapshot at %d: %w", at.index, err)
	}
	if _, err := sink.Write(fsmData); err != nil {
		sink.Cancel()
		return nil, fmt.Errorf("writing the leader's snapshot at %d: %w", at.index, err)
	}
	if err := sink.Close(); err != nil {
		return nil, fmt.Errorf("writing the leader's snapshot at %d: %w", at.index, err)
	}
	first, err := c.logs.FirstIndex()
	if err != nil {
		return nil, err
	}
	last, err := c.logs.LastIndex()
	if err != nil {
		return nil, err
	}
	if last > 0 {
		if err := c.logs.DeleteRange(first, last); err != nil {
			return nil, fmt.Errorf("deleting the log the snapshot at %d replaces: %w", at.index, err)
		}
	}
	if err := c.ms.ApplySnapshot(s); err != nil {
		return nil, fmt.Errorf("installing the snapshot at %d: %w", at.index, err)
	}
	c.names.Store(&known)
	c.setConf(at.cs)
	c.snapIndex.Store(at.index)
	c.handed = at.index
	return &etcdInstall{index: at.index, fsmData: fsmData}, nil
}

// restore replaces the state machine with an installed snapshot's.
func (c *core) restore(in *etcdInstall) error {
	if err := c.m.Restore(bytes.NewReader(in.fsmData)); err != nil {
		return fmt.Errorf("restoring the snapshot at %d: %w", in.index, err)
	}
	c.applied.Store(in.index)
	return nil
}

// etcdStorage is the storage raft reads: the MemoryStorage, except that
// a snapshot taken before a member joined is not sent. raft sends the
// snapshot its storage holds to a follower behind the compacted log, and
// a follower missing from the snapshot's configuration drops it (raft's
// restore); a member added after the last snapshot would be sent it again
// and again. Such a snapshot is answered temporarily unavailable (raft
// tries again later) and a new one, taken at once, carries the member.
type etcdStorage struct {
	*etcdraft.MemoryStorage
	c *core // set before raft runs
}

func (s *etcdStorage) Snapshot() (*raftpb.Snapshot, error) {
	snap, err := s.MemoryStorage.Snapshot()
	if err != nil || s.c == nil || etcdraft.IsEmptySnap(snap) {
		return snap, err
	}
	has := map[uint64]bool{}
	cs := snap.GetMetadata().GetConfState()
	for _, id := range append(cs.GetVoters(), cs.GetLearners()...) {
		has[id] = true
	}
	cur := s.c.conf.Load()
	for _, id := range append(cur.GetVoters(), cur.GetLearners()...) {
		if !has[id] {
			select {
			case s.c.snapWanted <- struct{}{}:
			default:
			}
			return nil, etcdraft.ErrSnapshotTemporarilyUnavailable
		}
	}
	return snap, nil
}

// etcdDropStaleLog deletes a log that ends before the snapshot at
// snapIndex: what a follower holds when it stopped after it wrote the
// leader's snapshot and before it deleted the log the snapshot replaces
// (install). Kept, it would refuse the entries raft appends after the
// snapshot.
func etcdDropStaleLog(logs raft.LogStore, snapIndex uint64) error {
	first, err := logs.FirstIndex()
	if err != nil {
		return err
	}
	last, err := logs.LastIndex()
	if err != nil {
		return err
	}
	if last == 0 || last >= snapIndex && !plant.On("snapshot-over-newer-log") {
		return nil
	}
	if err := logs.DeleteRange(first, last); err != nil {
		return fmt.Errorf("deleting the log %d..%d the snapshot at %d replaces: %w", first, last, snapIndex, err)
	}
	return nil
}
