package node

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/raftlog"
	"github.com/fencelock/fencelock/internal/replica"
)

// Storage is what one node runs on, the same for every engine: the log,
// stable and snapshot stores of its data directory, verified before the
// engine reads them (damage refuses to start instead of losing or
// reissuing tokens), with the token ceiling over the state file and the
// checkpointer that records it; or stores in memory without a data
// directory. Its Covered, PendingFloor and ClearPendingFloor are the
// replica.Log methods of that name for every engine.
type Storage struct {
	// Logs is the log store (the checked log on disk), Stable the
	// engine's small durable values, Snaps its snapshots.
	Logs   raft.LogStore
	Stable raft.StableStore
	Snaps  raft.SnapshotStore

	state   *stateFile  // nil without a data dir
	floor   *tokenFloor // nil without a data dir
	mem     memFloor    // the pending floor without a data dir
	wal     *healingWAL // nil without a data dir
	closers []io.Closer
}

type closerFunc func() error

func (f closerFunc) Close() error { return f() }

// OpenStorage claims cfg.DataDir for engine (EngineHashicorp or
// EngineEtcd), locks it and opens its stores; with no DataDir, stores in
// memory. Damage found is a *DataDirError.
func OpenStorage(cfg Config, engine string) (*Storage, error) {
	s := &Storage{}
	if cfg.DataDir == "" {
		mem := raft.NewInmemStore()
		s.Logs, s.Stable, s.Snaps = mem, mem, raft.NewInmemSnapshotStore()
		return s, nil
	}
	unlock, err := claimDataDir(cfg.DataDir, engine)
	if err != nil {
		return nil, err
	}
	s.closers = append(s.closers, closerFunc(unlock))
	segSize := cfg.WALSegmentSize
	if segSize <= 0 {
		segSize = WALSegmentSize
	}
	st, err := openStores(cfg.DataDir, engine, segSize, raftlog.New(cfg.Logger.With("component", "raft")), cfg.Logger)
	if err != nil {
		s.Close()
		return nil, err
	}
	s.closers = append(s.closers, closerFunc(st.close))
	s.Logs, s.Stable, s.Snaps, s.wal = st.logs, st.stable, st.snaps, st.wal
	s.state = st.state
	s.floor = newTokenFloor(st.state)
	s.closers = append(s.closers, startCheckpointer(st.state, time.Second))
	return s, nil
}

// claimDataDir makes dir, takes its lock (one process per data
// directory: a second server fails at once instead of hanging on the
// stores' own file locks) and claims it for engine: a dir the other
// engine wrote holds entries this one would misread, and is refused.
func claimDataDir(dir, engine string) (unlock func() error, err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("node: data dir: %w", err)
	}
	unlock, err = lockDir(dir)
	if err != nil {
		return nil, err
	}
	if err := claimEngine(dir, engine); err != nil {
		_ = unlock()
		return nil, err
	}
	return unlock, nil
}

// Close closes the stores and gives up the data directory; the engine
// closes first.
func (s *Storage) Close() error {
	var errs []error
	for i := len(s.closers) - 1; i >= 0; i-- {
		if err := s.closers[i].Close(); err != nil {
			errs = append(errs, err)
		}
	}
	s.closers = nil
	return errors.Join(errs...)
}

// Machine is f as this node's engine applies it, over this storage's
// token ceiling.
func (s *Storage) Machine(f *fsm.FSM, hooks Hooks) *Machine { return newMachine(f, s.floor, hooks) }

// Ceiling is the token ceiling the state file records: at or above every
// token this node applied. 0 in memory.
func (s *Storage) Ceiling() uint64 {
	if s.state == nil {
		return 0
	}
	return s.state.get().Ceiling
}

// Fault is the log's unresolved write failure; nil when it writes (and
// always in memory).
func (s *Storage) Fault() *replica.StorageError {
	if s.wal == nil {
		return nil
	}
	return s.wal.Fault()
}

// Boot records floor (Config.TokenFloor) as the floor the next leader
// commits before it serves a grant (the one `fencelock recover` leaves):
// a new cluster, or a cluster rebuilt from scratch, starts above every
// token the old one issued. A node that already has raft state (hasState
// is the engine's own test of that) records it too unless its state file
// shows it at or below the tokens applied here, so that a data dir
// restored from an old backup can be raised above the marks its fences
// keep, and the flag can stay on a command line across restarts without
// moving anything: committing a floor only ever raises the counter. A
// floor recorded on a node with state is committed when this node next
// leads (at once, alone).
func (s *Storage) Boot(floor uint64, hasState func() (bool, error)) error {
	if floor == 0 {
		return nil
	}
	if floor > MaxFloor {
		return fmt.Errorf("node: a token floor of %d is above %d: tokens would run out", floor, uint64(MaxFloor))
	}
	has, err := hasState()
	if err != nil {
		return fmt.Errorf("node: reading raft state: %w", err)
	}
	if s.state == nil {
		if !has {
			s.mem.set(floor)
		}
		return nil
	}
	if has && floor <= issuedAtLeast(s.state.get()) {
		return nil
	}
	if err := s.state.update(func(st *dirState) { st.PendingFloor = max(st.PendingFloor, floor) }, true); err != nil {
		return fmt.Errorf("node: recording the token floor: %w", err)
	}
	return nil
}

// issuedAtLeast is a token that st shows this node has applied (or will
// have, once its pending floor is committed): the ceiling is reserved a
// block ahead of the last token applied, and a pending floor is committed
// before any grant.
func issuedAtLeast(st dirState) uint64 {
	return max(st.PendingFloor, st.Ceiling-min(st.Ceiling, tokenBlock))
}

// Covered is nil once token is covered by this node's token ceiling (see
// tokenFloor.covers); an error says it is not and will not be.
func (s *Storage) Covered(token uint64, timeout time.Duration) error {
	if s.floor == nil {
		return nil
	}
	if err := s.floor.covers(token, timeout); err != nil {
		return fmt.Errorf("%w: %w: %v", replica.ErrUnavailable, errFloor, err)
	}
	return nil
}

// PendingFloor is the token floor that `fencelock recover` (or
// Config.TokenFloor at a node's first start) left in the state file for
// the next leader to commit before it serves a grant; 0: none.
func (s *Storage) PendingFloor() uint64 {
	if s.state == nil {
		return s.mem.get()
	}
	return s.state.get().PendingFloor
}

// ClearPendingFloor forgets floor once it is committed (fsynced).
func (s *Storage) ClearPendingFloor(floor uint64) error {
	if s.state == nil {
		s.mem.clear(floor)
		return nil
	}
	return s.state.update(func(st *dirState) {
		if st.PendingFloor == floor {
			st.PendingFloor = 0
		}
	}, true)
}
