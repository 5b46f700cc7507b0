package node

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/fencelock/fencelock/internal/fsm"
)

// MaxFloor is the largest token floor Recover accepts: far above any
// token a real server issues, far below where the counter would wrap.
const MaxFloor = 1 << 62

// RecoverOptions tune Recover.
type RecoverOptions struct {
	// MinToken, when not 0, is a token at or above every token the node
	// ever issued, given by the operator. It is required when the state
	// file itself is unreadable, and raises the floor otherwise.
	MinToken uint64
	// Now names the directory damaged files are moved to; zero: time.Now.
	Now time.Time
}

// Recover repairs the data directory dir of a stopped single-node server
// after the start refused it: it keeps the newest snapshot that reads back
// whole and the log entries that pass their checksums up to the first
// that does not (dropping the whole log when what is left cannot follow
// the snapshot), moves whatever it drops into dir/damaged-TIME/, and
// records a token floor at or above every token the node ever issued. The
// next start commits that floor before it serves a grant, so no token is
// issued twice. It returns what it did, one line per step.
//
// Leases granted in dropped entries are lost; their tokens are not
// reissued. A directory of the etcd engine, whose log Recover does not
// read, loses its log and snapshots (moved aside) and every lease, and
// keeps the floor. A cluster node is better wiped and rejoined from its
// peers.
func Recover(dir string, opts RecoverOptions) ([]string, error) {
	if opts.MinToken > MaxFloor {
		return nil, fmt.Errorf("recover: a minimum token of %d is above %d: tokens would run out", opts.MinToken, uint64(MaxFloor))
	}
	if opts.Now.IsZero() {
		opts.Now = time.Now()
	}
	var did []string
	say := func(format string, args ...any) { did = append(did, fmt.Sprintf(format, args...)) }
	if _, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("recover: %w", err)
	}
	unlock, err := lockDir(dir)
	if err != nil {
		return nil, fmt.Errorf("recover: %w", err)
	}
	defer unlock()
	engine, err := dirEngine(dir)
	switch {
	case err != nil:
		return nil, fmt.Errorf("recover: %w", err)
	case engine != "" && engine != EngineHashicorp && engine != EngineEtcd:
		return nil, fmt.Errorf("recover: %s reads %q, which names no engine: write the engine this directory's node runs into it "+
			"(%s or %s) before anything else", filepath.Join(dir, engineFileName), engine, EngineEtcd, EngineHashicorp)
	}
	logger := hclog.NewNullLogger()
	aside := filepath.Join(dir, "damaged-"+opts.Now.UTC().Format("20060102T150405Z"))
	moveAside := func(rel string) error {
		dst := filepath.Join(aside, rel)
		if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
			return err
		}
		return os.Rename(filepath.Join(dir, rel), dst)
	}

	prev, stateErr := readStateFile(OSFS{}, dir)
	if stateErr != nil {
		if opts.MinToken == 0 {
			return nil, fmt.Errorf("recover: the token floor in %s is unreadable (%v): pass --min-token N, "+
				"a token at or above every token this node ever issued", filepath.Join(dir, stateFileName), stateErr)
		}
		say("the token floor %s was unreadable (%v): using --min-token %d", filepath.Join(dir, stateFileName), stateErr, opts.MinToken)
		prev = dirState{}
	}
	floor := max(prev.Ceiling, prev.PendingFloor, opts.MinToken)
	if engine == EngineEtcd {
		if err := recoverEtcd(dir, floor, moveAside, aside, say); err != nil {
			return nil, err
		}
		return did, nil
	}

	// The newest snapshot that reads back whole.
	fss, err := raft.NewFileSnapshotStoreWithLogger(dir, 2, logger)
	if err != nil {
		return nil, fmt.Errorf("recover: snapshot store: %w", err)
	}
	metas, err := fss.List()
	if err != nil {
		return nil, fmt.Errorf("recover: listing snapshots: %w", err)
	}
	var (
		snap  *raft.SnapshotMeta
		state = fsm.New(nil)
	)
	for _, m := range metas {
		_, rc, err := fss.Open(m.ID)
		if err == nil {
			err = state.Restore(rc)
		}
		if err == nil {
			snap = m
			break
		}
		if err := moveAside(filepath.Join("snapshots", m.ID)); err != nil {
			return nil, fmt.Errorf("recover: moving a damaged snapshot aside: %w", err)
		}
		say("snapshot %s is damaged (%v): moved to %s", m.ID, err, aside)
	}
	var snapIndex, snapTerm uint64
	if snap != nil {
		snapIndex, snapTerm = snap.Index, snap.Term
		say("kept snapshot %s (index %d, last token %d)", snap.ID, snap.Index, state.LastToken())
	} else {
		say("no usable snapshot")
	}

	// The log: keep the good entries after the snapshot, or drop it.
	walDir := filepath.Join(dir, "wal")
	keep, term, end, why := recoverLog(dir, walDir, prev.CRCFrom, snapIndex, state, logger, say)
	if !keep {
		if _, err := os.Stat(walDir); err == nil {
			if err := moveAside("wal"); err != nil {
				return nil, fmt.Errorf("recover: moving the log aside: %w", err)
			}
			say("dropped the log (%s): moved %s to %s", why, walDir, aside)
		} else {
			say("dropped the log (%s)", why)
		}
		if err := os.MkdirAll(walDir, 0o700); err != nil {
			return nil, fmt.Errorf("recover: %w", err)
		}
		w, err := openWAL(walDir, logger)
		if err != nil {
			return nil, fmt.Errorf("recover: creating a new log: %w", err)
		}
		// Keep raft's term from going backwards. With no snapshot either
		// there is no raft state left: the next start bootstraps.
		if snap != nil {
			err = w.SetUint64([]byte("CurrentTerm"), max(term, snapTerm))
		}
		err = errors.Join(err, w.Close())
		if err != nil {
			return nil, fmt.Errorf("recover: creating a new log: %w", err)
		}
		end = snapIndex
		if snap == nil {
			say("no snapshot and no log: every lease is lost; the node starts empty and bootstraps again")
		}
	}
	if keep {
		// Whole writes after damage at the end of the last segment:
		// raft-wal's recovery reads only up to the damage, and the
		// start refuses the log while they follow it.
		tail, err := scanWALTail(OSFS{}, walDir)
		if err != nil {
			return nil, fmt.Errorf("recover: reading the log's last segment: %w", err)
		}
		if tail != nil && tail.later > end {
			if err := copyAside(tail.path, filepath.Join(aside, "wal", filepath.Base(tail.path))); err != nil {
				return nil, fmt.Errorf("recover: copying the log's last segment aside: %w", err)
			}
			if err := cutTail(OSFS{}, tail); err != nil {
				return nil, fmt.Errorf("recover: cutting the log's damaged tail: %w", err)
			}
			say("entries %d to %d in %s read back damaged: cut off (a copy is in %s)", end+1, tail.later, tail.path, aside)
			prev.Durable = min(prev.Durable, end)
		}
	}
	if keep && prev.Durable > end {
		say("entries %d to %d had been written and are lost (a lost or torn tail); their leases are gone, their tokens are covered by the floor",
			end+1, prev.Durable)
	}
	floor = max(floor, state.LastToken())
	crcFrom := prev.CRCFrom
	if !keep || crcFrom == 0 {
		crcFrom = end + 1
	}
	next := dirState{Ceiling: floor, Durable: end, CRCFrom: crcFrom, PendingFloor: floor}
	if err := writeStateFile(dir, next); err != nil {
		return nil, fmt.Errorf("recover: %w", err)
	}
	say("recorded token floor %d in %s: the next start commits it before serving, so the next token is above %d",
		floor, filepath.Join(dir, stateFileName), floor)
	return did, nil
}

// recoverEtcd repairs an etcd engine's directory the one way recover
// can while it reads only the hashicorp engine's log: it moves the log
// (with the engine's hard state, in wal-meta) and the snapshots aside and
// records floor, so the next start bootstraps empty and serves no token
// at or below it.
func recoverEtcd(dir string, floor uint64, moveAside func(string) error, aside string, say func(string, ...any)) error {
	say("the etcd engine's log and snapshots are not read by recover: every lease is lost, the tokens are covered by the floor")
	for _, rel := range []string{"wal", "snapshots"} {
		if _, err := os.Stat(filepath.Join(dir, rel)); errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err := moveAside(rel); err != nil {
			return fmt.Errorf("recover: moving %s aside: %w", filepath.Join(dir, rel), err)
		}
		say("moved %s to %s", filepath.Join(dir, rel), aside)
	}
	next := dirState{Ceiling: floor, CRCFrom: 1, PendingFloor: floor}
	if err := writeStateFile(dir, next); err != nil {
		return fmt.Errorf("recover: %w", err)
	}
	say("recorded token floor %d in %s: the next start bootstraps the node empty and commits it before serving, so the next token is above %d",
		floor, filepath.Join(dir, stateFileName), floor)
	return nil
}

// recoverLog checks the log entry by entry, truncates it before the first
// damaged entry after the snapshot and applies the kept entries to state
// (for their tokens). keep false means the log must be dropped, for why;
// term is raft's current term when it could be read; end is the last
// index the kept log and snapshot hold.
func recoverLog(dir, walDir string, crcFrom, snapIndex uint64, state *fsm.FSM, logger hclog.Logger,
	say func(string, ...any)) (keep bool, term, end uint64, why string) {
	segs, err := walFiles(OSFS{}, walDir)
	if err != nil {
		return false, 0, 0, err.Error()
	}
	if _, err := os.Stat(filepath.Join(walDir, walMetaFile)); err != nil {
		if len(segs) == 0 {
			return false, 0, 0, "no log files"
		}
		return false, 0, 0, walMetaFile + " is missing"
	}
	w, err := openWAL(walDir, logger)
	if err != nil {
		return false, 0, 0, fmt.Sprintf("it does not open: %v", err)
	}
	defer w.Close()
	term, _ = w.GetUint64([]byte("CurrentTerm"))
	first, err1 := w.FirstIndex()
	last, err2 := w.LastIndex()
	if err := errors.Join(err1, err2); err != nil {
		return false, term, 0, err.Error()
	}
	if last == 0 {
		return false, term, 0, "it is empty"
	}
	cl := &checkedLog{inner: w, crcFrom: crcFrom}
	badHead, badTail := uint64(0), uint64(0)
	var l raft.Log
	for i := first; i <= last; i++ {
		if err := readEntry(cl, i, &l); err != nil {
			if i <= snapIndex {
				badHead = i
				continue
			}
			badTail = i
			say("entry %d in %s is damaged (%v)", i, filepath.Join(dir, segmentFor(segs, i)), err)
			break
		}
	}
	if badHead > 0 {
		say("entries up to %d are damaged but covered by the snapshot", badHead)
		if err := w.DeleteRange(first, snapIndex); err != nil {
			return false, term, 0, fmt.Sprintf("dropping its head failed: %v", err)
		}
		first = snapIndex + 1
	}
	if badTail > 0 {
		if err := w.DeleteRange(badTail, last); err != nil {
			return false, term, 0, fmt.Sprintf("truncating it failed: %v", err)
		}
		say("truncated the log after entry %d: dropped %d entries from %d to %d", badTail-1, last-badTail+1, badTail, last)
		last = badTail - 1
	}
	switch {
	case last < first || last <= snapIndex && snapIndex > 0:
		return false, term, 0, fmt.Sprintf("what is left ends at %d, not after the snapshot at %d", last, snapIndex)
	case first > snapIndex+1:
		return false, term, 0, fmt.Sprintf("it starts at %d but the entries after %d are in no snapshot", first, snapIndex)
	}
	for i := max(first, snapIndex+1); i <= last; i++ {
		if err := readEntry(cl, i, &l); err != nil {
			return false, term, 0, err.Error()
		}
		if l.Type == raft.LogCommand {
			state.Apply(l.Index, l.Term, l.Data)
		}
	}
	say("kept log entries %d to %d (last token %d)", first, last, state.LastToken())
	return true, term, last, ""
}

// writeStateFile replaces dir's state file with one holding s.
func writeStateFile(dir string, s dirState) error {
	tmp := filepath.Join(dir, stateFileName+".tmp")
	b := make([]byte, stateFileLen)
	copy(b, encodeStateSlot(1, s))
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	err = errors.Join(err, f.Sync(), f.Close())
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, stateFileName))
	}
	if err == nil {
		err = syncDir(dir)
	}
	return err
}

// copyAside copies the file src to dst, making dst's directory.
func copyAside(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o600)
}
