package node

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"

	"github.com/fencelock/fencelock/internal/plant"
)

// DataDirError is damage found in a data directory at start: the server
// refuses to run on it rather than reissue tokens or lose acknowledged
// grants. Its message is one line that names the file and the repair.
type DataDirError struct {
	Dir     string // the data directory
	File    string // the damaged file or directory
	Problem string
	// Repair says what mends it; empty: recover it (a single node) or
	// wipe and rejoin it (a cluster node).
	Repair string
}

func (e *DataDirError) Error() string {
	repair := e.Repair
	if repair == "" {
		repair = fmt.Sprintf("Single node: run `fencelock recover --data %s`. Cluster node: stop it, wipe %s and rejoin it "+
			"from its peers (docs/OPERATIONS.md)", e.Dir, e.Dir)
	}
	return fmt.Sprintf("data directory %s is damaged: %s: %s; refusing to start. %s", e.Dir, e.File, e.Problem, repair)
}

// RereadDamage is the refusal for entry index of cfg's log failing to
// read back (err) when the engine reads it after the start's checks had
// read it whole: the two reads differ, so the disk is failing or one of
// them flipped a bit. nil when err is no damage.
func RereadDamage(cfg Config, index uint64, err error) *DataDirError {
	if cfg.DataDir == "" || !errors.Is(err, wal.ErrCorrupt) && !errors.Is(err, errEntryCorrupt) {
		return nil
	}
	segs, _ := walFiles(fsOf(cfg), filepath.Join(cfg.DataDir, "wal")) // without them the message names wal/
	return rereadDamage(cfg.DataDir, segmentFor(segs, index), fmt.Sprintf("entry %d", index), err)
}

// SnapshotRereadDamage is RereadDamage for the snapshot id, which the
// start's checks had read back whole.
func SnapshotRereadDamage(cfg Config, id string, err error) *DataDirError {
	if cfg.DataDir == "" || !errors.Is(err, errSnapCorrupt) {
		return nil
	}
	return rereadDamage(cfg.DataDir, filepath.Join("snapshots", id), "the snapshot", err)
}

func rereadDamage(dir, file, what string, err error) *DataDirError {
	return damage(dir, file, "%s read back differently twice (whole, then %v): a failing disk or a flipped read; "+
		"start it again, and if this persists rebuild the node", what, err)
}

// walMetaFile is raft-wal's metadata (segment list, term and vote); it
// deletes every segment it does not list, so its loss must be caught
// before the log is opened.
const walMetaFile = "wal-meta.db"

// stores are the opened, verified raft stores of a data directory.
type stores struct {
	logs    *checkedLog
	wal     *healingWAL
	stable  raft.StableStore
	snaps   raft.SnapshotStore
	state   *stateFile
	closers []io.Closer
}

// damage builds the error for file (relative to dir).
func damage(dir, file, format string, args ...any) *DataDirError {
	return &DataDirError{Dir: dir, File: filepath.Join(dir, file), Problem: fmt.Sprintf(format, args...)}
}

// walFiles lists the segment files in walDir, sorted by name (raft-wal
// names them base index then id, zero-padded, so that is log order).
func walFiles(fsys FS, walDir string) ([]string, error) {
	ents, err := fsys.ReadDir(walDir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	var segs []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".wal") {
			segs = append(segs, e.Name())
		}
	}
	sort.Strings(segs)
	return segs, nil
}

// segmentFor names the segment file that holds index, for messages.
func segmentFor(segs []string, index uint64) string {
	name := "wal"
	for _, s := range segs {
		var base uint64
		if _, err := fmt.Sscanf(s, "%020d-", &base); err == nil && base <= index {
			name = filepath.Join("wal", s)
		}
	}
	return name
}

// openGuarded runs open, turning a panic inside raft-wal (it panics on
// some damaged segments) into an error matching wal.ErrCorrupt.
func openGuarded[W any](open func() (W, error)) (w W, err error) {
	defer func() {
		if p := recover(); p != nil {
			var none W
			w, err = none, fmt.Errorf("%w: the log reader failed: %v", wal.ErrCorrupt, p)
		}
	}()
	return open()
}

// openWAL opens raft-wal itself, for recover's offline repair.
func openWAL(walDir string, logger hclog.Logger) (*wal.WAL, error) {
	return openGuarded(func() (*wal.WAL, error) {
		return wal.Open(walDir, wal.WithLogger(logger), wal.WithSegmentSize(WALSegmentSize))
	})
}

// verifyParts is how many goroutines verifyEntries reads with: raft-wal
// copies 64 KiB for every entry it reads, so a long log after a burst of
// writes (hundreds of thousands of entries since the last snapshot) costs
// seconds of one core at startup, and the reads are independent.
var verifyParts = max(1, min(runtime.GOMAXPROCS(0), 4))

// verifyEntries reads entries first..last through their checksums, in
// verifyParts contiguous parts at once, and reports the lowest index that
// fails and why, as a read in order would.
func verifyEntries(l *checkedLog, first, last uint64) (uint64, error) {
	n := last - first + 1
	parts := uint64(verifyParts)
	if n < 4096 || parts == 1 {
		parts = 1
	}
	type failure struct {
		index uint64
		err   error
	}
	failures := make([]failure, parts)
	var wg sync.WaitGroup
	for p := range parts {
		lo := first + n*p/parts
		hi := first + n*(p+1)/parts - 1
		wg.Add(1)
		go func() {
			defer wg.Done()
			var e raft.Log
			for i := lo; i <= hi; i++ {
				if err := readEntry(l, i, &e); err != nil {
					failures[p] = failure{i, err}
					return
				}
			}
		}()
	}
	wg.Wait()
	for _, f := range failures { // in index order: the first part that failed
		if f.err != nil {
			return f.index, f.err
		}
	}
	return 0, nil
}

// readEntry reads one entry through the checksum, turning a panic inside
// raft-wal into an error.
func readEntry(l *checkedLog, index uint64, out *raft.Log) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: reading entry %d failed: %v", wal.ErrCorrupt, index, p)
		}
	}()
	return l.GetLog(index, out)
}

// latestSnapshot returns the newest snapshot's metadata after reading it
// through its checksum, or nil when there is none.
func latestSnapshot(snaps raft.SnapshotStore) (*raft.SnapshotMeta, error) {
	list, err := snaps.List()
	if err != nil || len(list) == 0 {
		return nil, err
	}
	_, rc, err := snaps.Open(list[0].ID)
	if err != nil {
		return list[0], err
	}
	rc.Close()
	return list[0], nil
}

// openStores opens the log, stable and snapshot stores of dir (already
// locked, written by engine) and verifies them before raft sees them: the
// state file is readable, raft-wal's metadata and segments are present
// when the log had entries, every entry's checksum matches, the log
// reaches the watermark of what had been durably written, and a snapshot
// covers what the log no longer holds. Any damage is a *DataDirError.
func openStores(fsys FS, dir, engine string, segSize int, logger hclog.Logger, log *slog.Logger) (_ *stores, err error) {
	st := &stores{}
	defer func() {
		if err != nil {
			st.close()
		}
	}()
	walDir := filepath.Join(dir, "wal")
	snapDir := filepath.Join(dir, "snapshots")
	prev, stateErr := readStateFile(fsys, dir)
	hasState := stateErr == nil
	if stateErr != nil && !errors.Is(stateErr, fs.ErrNotExist) {
		return nil, damage(dir, stateFileName, "%v", stateErr)
	}
	segs, err := walFiles(fsys, walDir)
	if err != nil {
		return nil, fmt.Errorf("node: data dir: %w", err)
	}
	_, metaErr := fsys.Stat(filepath.Join(walDir, walMetaFile))
	hasMeta := metaErr == nil
	_, snapDirErr := fsys.Stat(snapDir)
	hasSnapDir := snapDirErr == nil
	_, walDirErr := fsys.Stat(walDir)
	switch {
	case hasState && prev.Durable > 0 && walDirErr != nil:
		return nil, damage(dir, "wal", "the log directory is missing, but the log had entries up to index %d", prev.Durable)
	case !hasMeta && len(segs) > 0:
		return nil, damage(dir, filepath.Join("wal", walMetaFile), "missing while %d log segment file(s) exist", len(segs))
	case hasState && prev.Durable > 0 && !hasMeta:
		return nil, damage(dir, filepath.Join("wal", walMetaFile), "missing, but the log had entries up to index %d", prev.Durable)
	case hasState && prev.Durable > 0 && len(segs) == 0:
		return nil, damage(dir, "wal", "no log segment files, but the log had entries up to index %d", prev.Durable)
	case hasState && prev.Durable > 0 && !hasSnapDir:
		return nil, damage(dir, "snapshots", "the snapshot directory is missing")
	}
	if err := fsys.MkdirAll(walDir); err != nil {
		return nil, fmt.Errorf("node: data dir: %w", err)
	}
	// raft-wal appends and fsyncs once per batch of entries; segments
	// whose entries are all covered by a snapshot are deleted.
	w, err := openGuarded(func() (*healingWAL, error) { return openHealingWAL(fsys, walDir, segSize, logger, log) })
	if err != nil {
		if errors.Is(err, wal.ErrCorrupt) {
			return nil, damage(dir, segmentFor(segs, ^uint64(0)), "%v", err)
		}
		return nil, fmt.Errorf("node: opening the log in %s: %w", walDir, err)
	}
	st.closers = append(st.closers, w)
	st.stable, st.wal = w, w
	fss, err := openSnapStore(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("node: snapshot store: %w", err)
	}
	st.snaps = fss
	snap, err := latestSnapshot(fss)
	if err != nil {
		file := "snapshots"
		if snap != nil {
			file = filepath.Join("snapshots", snap.ID)
		}
		return nil, damage(dir, file, "unreadable: %v", err)
	}
	var snapIndex uint64
	if snap != nil {
		snapIndex = snap.Index
	}
	first, err := w.FirstIndex()
	if err != nil {
		return nil, fmt.Errorf("node: reading the log: %w", err)
	}
	last, err := w.LastIndex()
	if err != nil {
		return nil, fmt.Errorf("node: reading the log: %w", err)
	}

	if !hasState {
		// A new directory, or one from before the state file. A log that
		// carries checksums had one: it was lost.
		init := dirState{CRCFrom: 1, Durable: max(last, snapIndex)}
		if last > 0 {
			var l raft.Log
			if err := w.GetLog(last, &l); err == nil && len(l.Extensions) >= entryTrailerLen &&
				string(l.Extensions[:len(entryMagic)]) == entryMagic {
				return nil, damage(dir, stateFileName, "missing, but the log was written with it")
			}
			init.CRCFrom = last + 1
		}
		prev = init
	}
	sf, err := openStateFile(fsys, dir, prev)
	if err != nil {
		return nil, damage(dir, stateFileName, "%v", err)
	}
	st.state = sf
	st.closers = append(st.closers, closerFunc(sf.close))
	st.logs = &checkedLog{inner: w, state: sf, crcFrom: prev.CRCFrom}

	// Every entry, through its checksum. Snapshots every few thousand
	// entries keep this short.
	if last > 0 {
		if i, err := verifyEntries(st.logs, first, last); err != nil {
			return nil, damage(dir, segmentFor(segs, i), "entry %d of %d..%d: %v", i, first, last, err)
		}
	}
	// What raft-wal dropped at the end of its last segment as a torn
	// write, read again (waltail.go).
	tail, err := scanWALTail(fsys, walDir)
	if err != nil {
		return nil, fmt.Errorf("node: reading the log's last segment: %w", err)
	}
	end := max(last, snapIndex)
	switch {
	case tail != nil && (tail.kept > 0 && tail.lastKept() != last || tail.kept == 0 && last >= tail.base):
		// A flipped bit as one of the two read it: what is on the disk
		// read back whole once, so nothing may be dropped.
		return nil, damage(dir, filepath.Join("wal", filepath.Base(tail.path)),
			"read back differently twice (entries up to %d, then up to %d): a failing disk or a flipped read; "+
				"start it again, and if this persists rebuild the node", last, tail.lastKept())
	case tail != nil && tail.later > last && !plant.On("torn-tail-accepted"):
		return nil, damage(dir, filepath.Join("wal", filepath.Base(tail.path)),
			"entries %d..%d were written and synced but the log reads back damaged after entry %d "+
				"(a whole later write follows the damage, so it is no torn write)", last+1, tail.later, last)
	case end < prev.Durable && !plant.On("torn-tail-accepted"):
		return nil, damage(dir, segmentFor(segs, end+1),
			"the log ends at index %d but entries up to %d had been written (a lost, torn or damaged tail)", end, prev.Durable)
	case last > 0 && first > 1 && snapIndex < first-1:
		file := "snapshots"
		if snap != nil {
			file = filepath.Join("snapshots", snap.ID)
		}
		return nil, damage(dir, file, "the log starts at index %d but no snapshot covers the entries before it", first)
	case last > 0 && last < snapIndex && engine != EngineEtcd:
		// The etcd engine writes a snapshot from the leader before it
		// deletes the log the snapshot replaces, and drops that log at
		// open when it stopped in between (etcdDropStaleLog).
		return nil, damage(dir, segmentFor(segs, last), "the log ends at index %d, before the snapshot at %d", last, snapIndex)
	}
	if tail != nil && tail.cutSealed {
		// The write that sealed the last segment never completed, and
		// nothing says it had been synced: a torn tail, but one raft-wal
		// takes for a sealed segment that nothing can be appended to.
		if err := w.rewrite(func() error { return cutTornSeal(fsys, tail) }); err != nil {
			return nil, fmt.Errorf("node: cutting the torn sealing write off %s: %w", tail.path, err)
		}
		if again, err := w.LastIndex(); err != nil || again != last {
			return nil, damage(dir, filepath.Join("wal", filepath.Base(tail.path)),
				"ends at index %d after its torn sealing write was cut, not at %d (%v)", again, last, err)
		}
		log.Warn("the log's last segment ended in a sealing write that never completed; it was cut off",
			"file", tail.path, "last", last)
	}
	return st, nil
}

func (st *stores) close() error {
	var errs []error
	for i := len(st.closers) - 1; i >= 0; i-- {
		errs = append(errs, st.closers[i].Close())
	}
	st.closers = nil
	return errors.Join(errs...)
}
