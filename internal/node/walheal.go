package node

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fencelock/fencelock/internal/node/walseg"
	"github.com/fencelock/fencelock/internal/replica"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
	walfs "github.com/hashicorp/raft-wal/fs"
)

// healingWAL is the raft log and stable store: a raft-wal WAL that repairs
// itself after a failed segment rotation.
//
// raft-wal seals a full segment inside an append and opens the next one in
// the background. When that open fails (EMFILE, ENOSPC), the rotation is
// only logged: the WAL keeps the sealed segment as its tail and every later
// append fails with ErrSealed, for as long as the process lives. Worse, a
// log compaction in that state records the sealed tail as unsealed in the
// WAL's metadata, and a restart then reopens a tail that can never be
// appended to. So healingWAL watches for the rotation error, refuses to
// compact while it stands, and on the next append closes the WAL and opens
// it again from disk, which creates the missing segment (raft-wal's own
// crash recovery), once a probe shows descriptors and space are back.
// Entries already appended were fsynced in the sealed segment and are kept.
type healingWAL struct {
	fsys    FS
	dir     string
	segSize int
	open    func() (*wal.WAL, error)
	log     *slog.Logger

	mu sync.RWMutex // write: swapping w; read: any call on w
	w  *wal.WAL
	// rotateFailed is set by the WAL's logger when a rotation fails and
	// cleared by a repair.
	rotateFailed atomic.Bool
	// fault is the unresolved storage failure, for the API to answer
	// with; nil when the log writes.
	fault atomic.Pointer[replica.StorageError]
	// closed: Close was called; no more repairs.
	closed bool
}

func openHealingWAL(fsys FS, dir string, segSize int, logger hclog.Logger, log *slog.Logger) (*healingWAL, error) {
	h := &healingWAL{fsys: fsys, dir: dir, segSize: segSize, log: log}
	h.open = func() (*wal.WAL, error) {
		watch := wal.WithLogger(&rotateWatch{Logger: logger, failed: &h.rotateFailed})
		// Sealed segments are read through walseg's filer (windows).
		if isOS(fsys) {
			return wal.Open(dir, watch, wal.WithSegmentSize(segSize), wal.WithSegmentFiler(walseg.NewFiler(dir, walfs.New())))
		}
		// raft-wal's segments over fsys through its own VFS, and its
		// metadata in a file of fsys instead of bolt (walmeta.go).
		return wal.Open(dir, watch, wal.WithSegmentSize(segSize),
			wal.WithSegmentFiler(walseg.NewFiler(dir, walVFS{fsys})), wal.WithMetaStore(&walMeta{fsys: fsys}))
	}
	w, err := h.open()
	if err != nil {
		return nil, err
	}
	h.w = w
	return h, nil
}

// rotateWatch passes the WAL's log lines on and notes a failed rotation
// (raft-wal reports it only there).
type rotateWatch struct {
	hclog.Logger
	failed *atomic.Bool
}

func (r *rotateWatch) Error(msg string, args ...any) {
	if msg == "rotate error" {
		r.failed.Store(true)
	}
	r.Logger.Error(msg, args...)
}

// Fault returns the unresolved storage failure, or nil.
func (h *healingWAL) Fault() *replica.StorageError { return h.fault.Load() }

func (h *healingWAL) current() (*wal.WAL, func()) {
	h.mu.RLock()
	return h.w, h.mu.RUnlock
}

// StoreLogs appends; after a failed rotation it repairs the WAL first.
func (h *healingWAL) StoreLogs(logs []*raft.Log) error {
	if h.rotateFailed.Load() {
		if err := h.repair(); err != nil {
			return err
		}
	}
	w, done := h.current()
	err := w.StoreLogs(logs)
	done()
	if errors.Is(err, wal.ErrSealed) {
		// A rotation failed before the watch could see it (or in an
		// earlier process): repair and try once more.
		h.rotateFailed.Store(true)
		if rerr := h.repair(); rerr != nil {
			return rerr
		}
		w, done = h.current()
		err = w.StoreLogs(logs)
		done()
		if errors.Is(err, wal.ErrSealed) {
			// Reopened and still sealed: the metadata records the sealed
			// segment as the open one (see unsealTail).
			if uerr := h.unseal(); uerr != nil {
				return uerr
			}
			w, done = h.current()
			err = w.StoreLogs(logs)
			done()
		}
	}
	return h.result(err)
}

// unseal closes the WAL, unseals its last segment and reopens it.
func (h *healingWAL) unseal() error {
	var path string
	var uerr error
	if err := h.rewrite(func() error { path, uerr = unsealTail(h.fsys, h.dir); return nil }); err != nil {
		return fmt.Errorf("reopening the log after unsealing %s: %w", path, errors.Join(uerr, err))
	}
	if uerr != nil {
		return fmt.Errorf("node: the log's last segment is sealed and cannot be appended to: %w", uerr)
	}
	h.rotateFailed.Store(false)
	h.log.Warn("the log's last segment was sealed but recorded as open; it was unsealed, every entry kept", "file", path)
	return nil
}

func (h *healingWAL) StoreLog(l *raft.Log) error { return h.StoreLogs([]*raft.Log{l}) }

// DeleteRange refuses to compact while a rotation failure stands: the
// WAL would record its sealed tail as unsealed (see healingWAL).
func (h *healingWAL) DeleteRange(min, max uint64) error {
	if h.rotateFailed.Load() {
		if err := h.repair(); err != nil {
			return err
		}
	}
	w, done := h.current()
	defer done()
	return w.DeleteRange(min, max)
}

// result records the fault for err, a write's outcome, or clears it when
// an append (not a stable-store write) succeeded.
func (h *healingWAL) result(err error) error {
	return h.outcome(err, true)
}

func (h *healingWAL) outcome(err error, isAppend bool) error {
	if err == nil {
		if isAppend && h.fault.Swap(nil) != nil {
			h.log.Info("the log writes again")
		}
		return nil
	}
	if isResourceErr(err) {
		se := &replica.StorageError{Err: err}
		if h.fault.Swap(se) == nil {
			h.log.Error("the log cannot write; writes are refused until it can", "err", err)
		}
		return se
	}
	return err
}

func isResourceErr(err error) bool {
	for _, e := range []error{syscall.ENOSPC, syscall.EDQUOT, syscall.EMFILE, syscall.ENFILE} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// repair reopens the WAL once the probe passes. The old WAL stays open
// (and readable) when the probe fails; a reopen that fails after the old
// one was closed is retried for a few seconds, since raft cannot read its
// log in between.
func (h *healingWAL) repair() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.rotateFailed.Load() {
		return nil // repaired by a concurrent call
	}
	if h.closed {
		return wal.ErrClosed
	}
	if err := h.probe(); err != nil {
		return h.outcome(fmt.Errorf("the last log segment rotation failed and cannot be redone yet: %w", err), false)
	}
	if err := h.w.Close(); err != nil {
		h.log.Warn("closing the log for repair", "err", err)
	}
	var (
		w   *wal.WAL
		err error
	)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		h.rotateFailed.Store(false)
		if w, err = h.open(); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		h.rotateFailed.Store(true)
		return h.outcome(fmt.Errorf("reopening the log after a failed segment rotation: %w", err), false)
	}
	h.w = w
	h.log.Warn("the log was reopened after a failed segment rotation", "dir", h.dir)
	return nil
}

// probe checks that a new segment can be made now: a handful of free
// descriptors and room for one segment (fallocate where it is supported).
func (h *healingWAL) probe() error {
	var files []File
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	for range 8 {
		f, err := h.fsys.OpenFile(h.dir, os.O_RDONLY, 0)
		if err != nil {
			return err
		}
		files = append(files, f)
	}
	path := filepath.Join(h.dir, "fencelock-probe.tmp")
	f, err := h.fsys.OpenFile(path, os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer h.fsys.Remove(path)
	defer f.Close()
	return f.Allocate(int64(h.segSize))
}

func (h *healingWAL) FirstIndex() (uint64, error) {
	w, done := h.current()
	defer done()
	return w.FirstIndex()
}

func (h *healingWAL) LastIndex() (uint64, error) {
	w, done := h.current()
	defer done()
	return w.LastIndex()
}

func (h *healingWAL) GetLog(index uint64, l *raft.Log) error {
	// Not current(): its method value is an allocation for every entry a
	// restart reads (three times each: verify, raft's start, the replay).
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.w.GetLog(index, l)
}

func (h *healingWAL) Set(k, v []byte) error {
	w, done := h.current()
	defer done()
	return h.outcome(w.Set(k, v), false)
}

func (h *healingWAL) Get(k []byte) ([]byte, error) {
	w, done := h.current()
	defer done()
	return w.Get(k)
}

func (h *healingWAL) SetUint64(k []byte, v uint64) error {
	w, done := h.current()
	defer done()
	return h.outcome(w.SetUint64(k, v), false)
}

func (h *healingWAL) GetUint64(k []byte) (uint64, error) {
	w, done := h.current()
	defer done()
	return w.GetUint64(k)
}

// IsMonotonic: raft-wal only appends at the end (raft.MonotonicLogStore).
func (h *healingWAL) IsMonotonic() bool { return true }

func (h *healingWAL) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	return h.w.Close()
}

var (
	_ raft.LogStore          = (*healingWAL)(nil)
	_ raft.StableStore       = (*healingWAL)(nil)
	_ raft.MonotonicLogStore = (*healingWAL)(nil)
	_ io.Closer              = (*healingWAL)(nil)
)
