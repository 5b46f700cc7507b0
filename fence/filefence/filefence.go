// Package filefence is a durable fence.Fence for a resource that has no
// database: the marks (per resource, the highest token honoured, the last
// write's token, the lock key it is bound to and when its mark last rose)
// live in files under a directory, and a raised mark is on disk before
// the effect runs, so before its success can be acknowledged. A restarted
// process that opens the same directory refuses every token its
// predecessor had superseded.
//
// A raise costs one small synced write: the new mark is appended to
// DIR/marks.log and fsynced. A holder writing many times under one grant
// (an equal token) costs no disk write. When the log has grown past the
// number of resources (and at least a few thousand records), it is
// compacted: every mark is written to DIR/marks (a temporary file,
// fsynced, renamed over the old one, the directory fsynced) and the log
// starts again. Both files carry a generation, so a log left over from
// before a compaction is recognised and not read twice.
//
// A snapshot that is there but cannot be read back whole (truncated,
// edited, checksum wrong), or a log record that fails its checksum, is an
// error from Open, never an empty fence: starting from zero would let
// every stale holder back in. The one exception is the log's last line
// when it has no newline: that is an append a crash cut short, whose
// fsync never returned and whose effect therefore never ran; it is
// dropped (and cut off the file, so the next append starts clean).
//
// One process owns a directory at a time (an flock on DIR/LOCK where the
// platform has one): two processes each keeping their own marks would not
// fence anything. ReadMarks reads a directory without taking it.
package filefence

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/fencelock/fencelock/clock"
	"github.com/fencelock/fencelock/fence"
	"github.com/fencelock/fencelock/fence/internal/ctxlock"
)

// FileName is the snapshot of the marks inside the directory; LogName the
// log of marks raised since.
const (
	FileName = "marks"
	LogName  = "marks.log"
)

// ErrCorrupt is wrapped by Open's error when the marks are unreadable.
var ErrCorrupt = errors.New("filefence: marks file is corrupt")

// ErrLocked is wrapped by Open's error when another process has the
// directory.
var ErrLocked = errors.New("filefence: directory is in use")

// Mark is what the fence keeps of one resource.
type Mark struct {
	Resource string
	// Highest is the highest token honoured, and every write must be at
	// least it; LastWrite is the last write's (a read, with AdmitRead,
	// must be at least it). An Admit is a write and sets both.
	Highest   uint64
	LastWrite uint64
	// Key is the lock key the resource is bound to ("" if none: the fence
	// does not verify, or the mark is from before it did).
	Key string
	// Raised is when the mark last changed.
	Raised time.Time
}

// Fence is a fence.Fence whose marks survive a restart. Use Open.
type Fence struct {
	dir    string
	unlock func() error
	verify *fence.Verification
	clock  clock.Clock

	mu        sync.Mutex // guards resources
	resources map[string]*resource

	fileMu sync.Mutex // serialises the files; guards store and closed
	store  *store
	closed bool
}

type resource struct {
	lock *ctxlock.Mutex // held across the check and the effect
	// mu guards mark for a reader that must not wait for lock (a
	// verification's first step); it changes holding both.
	mu   sync.Mutex
	mark Mark
}

var _ fence.Fence = (*Fence)(nil)

// Option configures Open.
type Option func(*options)

type options struct {
	verify     *fence.Verification
	clock      clock.Clock
	compactMin int
}

// WithVerification makes the fence confirm each new token with the lock
// service before it raises a mark, and record the lock key the resource
// is bound to (fence.Verification).
func WithVerification(v *fence.Verification) Option { return func(o *options) { o.verify = v } }

// WithClock is the clock the marks' Raised times are read from
// (clock.System by default).
func WithClock(c clock.Clock) Option { return func(o *options) { o.clock = c } }

// withCompactMin is the fewest log records that make a compaction.
func withCompactMin(n int) Option { return func(o *options) { o.compactMin = n } }

// Open loads the marks in dir (creating dir if needed) and locks it for this
// process. No marks is an empty fence; damaged ones are an error wrapping
// ErrCorrupt, another process's directory one wrapping ErrLocked; a
// verification that binds no resource (fence.Verification.Validate) is an
// error too.
func Open(dir string, opts ...Option) (*Fence, error) {
	o := options{clock: clock.System{}, compactMin: defaultCompactMin}
	for _, opt := range opts {
		opt(&o)
	}
	if err := o.verify.Validate(); err != nil {
		return nil, fmt.Errorf("filefence: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("filefence: %w", err)
	}
	unlock, err := lockDir(filepath.Join(dir, "LOCK"))
	if err != nil {
		return nil, err
	}
	st, err := openStore(dir, o.compactMin)
	if err != nil {
		_ = unlock()
		return nil, err
	}
	f := &Fence{dir: dir, unlock: unlock, verify: o.verify, clock: o.clock, resources: map[string]*resource{}, store: st}
	for name, m := range st.marks {
		f.resources[name] = &resource{lock: ctxlock.New(), mark: m}
	}
	return f, nil
}

var errClosed = errors.New("filefence: fence is closed")

func (f *Fence) isClosed() bool {
	f.fileMu.Lock()
	defer f.fileMu.Unlock()
	return f.closed
}

// Close releases the directory. Admit after Close fails.
func (f *Fence) Close() error {
	f.fileMu.Lock()
	defer f.fileMu.Unlock()
	if f.closed {
		return nil
	}
	f.closed = true
	return errors.Join(f.store.close(), f.unlock())
}

func (f *Fence) get(name string) *resource {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.resources[name]
	if r == nil {
		r = &resource{lock: ctxlock.New(), mark: Mark{Resource: name}}
		f.resources[name] = r
	}
	return r
}

func (r *resource) acquire(ctx context.Context) error { return r.lock.Lock(ctx) }

func (r *resource) release() { r.lock.Unlock() }

// peek is r's mark without waiting for r's lock.
func (r *resource) peek() Mark {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mark
}

func (r *resource) set(m Mark) {
	r.mu.Lock()
	r.mark = m
	r.mu.Unlock()
}

// Admit implements fence.Fence. A token above the mark is verified (with
// WithVerification, before the resource is locked: the current holder
// never waits for the lock service) and written to disk (fsynced) before
// effect runs; if either fails, effect does not run and Admit returns the
// error. An equal
// token needs no write. Admit is AdmitWrite.
func (f *Fence) Admit(ctx context.Context, name string, token uint64, effect func(context.Context) error) error {
	return f.admit(ctx, name, token, true, effect)
}

// AdmitWrite admits a write of a read/write lock's writer (fence.RWFence):
// token must be at least every token admitted on resource, reads
// included; it becomes the last write's.
func (f *Fence) AdmitWrite(ctx context.Context, name string, token uint64, effect func(context.Context) error) error {
	return f.admit(ctx, name, token, true, effect)
}

// AdmitRead admits a read of a read/write lock's reader (fence.RWFence):
// token must be at least the last write's; a higher one raises the mark
// writes are checked against (on disk, as a write's does). Reads of one
// resource are admitted one at a time, as writes are.
func (f *Fence) AdmitRead(ctx context.Context, name string, token uint64, effect func(context.Context) error) error {
	return f.admit(ctx, name, token, false, effect)
}

var _ fence.RWFence = (*Fence)(nil)

func (f *Fence) admit(ctx context.Context, name string, token uint64, write bool, effect func(context.Context) error) error {
	if token == 0 {
		return fence.ErrMissingToken
	}
	if f.isClosed() {
		return errClosed
	}
	r := f.get(name)
	for attempt := 1; ; attempt++ {
		// The lock service is asked before the resource is locked: the
		// current holder never waits for it (fence.Verification).
		var pre fence.Verified
		if f.verify != nil {
			m := r.peek()
			if err := stale(name, token, write, m); err != nil {
				return err
			}
			var err error
			if pre, err = f.verify.Ask(ctx, name, token, m.Highest, m.Key); err != nil {
				return err
			}
		}
		if err := r.acquire(ctx); err != nil {
			return err
		}
		err, again := f.admitLocked(ctx, r, name, token, write, pre, effect)
		r.release()
		if !again || attempt == fence.MaxReverify {
			return err
		}
	}
}

func stale(name string, token uint64, write bool, m Mark) error {
	switch {
	case write && token < m.Highest:
		return &fence.StaleTokenError{Resource: name, Token: token, Highest: m.Highest}
	case !write && token < m.LastWrite:
		return &fence.StaleTokenError{Resource: name, Token: token, Highest: m.LastWrite}
	}
	return nil
}

// admitLocked is admit holding r: again when the verification must be
// asked again.
func (f *Fence) admitLocked(ctx context.Context, r *resource, name string, token uint64, write bool, pre fence.Verified, effect func(context.Context) error) (err error, again bool) {
	m := r.mark
	if err := stale(name, token, write, m); err != nil {
		return err, false
	}
	key, err := f.verify.Confirm(ctx, name, token, m.Highest, m.Key, pre)
	if err != nil {
		return err, errors.Is(err, fence.ErrReverify)
	}
	next := Mark{Resource: name, Highest: max(m.Highest, token), LastWrite: m.LastWrite, Key: key, Raised: m.Raised}
	if write {
		next.LastWrite = token
	}
	if next.Highest != m.Highest || next.LastWrite != m.LastWrite || next.Key != m.Key {
		next.Raised = f.clock.Now()
		if err := f.persist(next); err != nil {
			return err, false
		}
		r.set(next)
	}
	if effect == nil {
		return nil, false
	}
	return effect(ctx), false
}

// Highest is the highest token honoured on resource (0 if none).
func (f *Fence) Highest(name string) uint64 {
	r := f.get(name)
	_ = r.acquire(context.Background()) // never fails: Background never ends
	defer r.release()
	return r.mark.Highest
}

// persist records m on disk.
func (f *Fence) persist(m Mark) error {
	f.fileMu.Lock()
	defer f.fileMu.Unlock()
	if f.closed {
		return errClosed
	}
	if err := f.store.append(m); err != nil {
		return fmt.Errorf("filefence: recording token %d for %q: %w", m.Highest, m.Resource, err)
	}
	return nil
}

// Marks lists the marks, sorted by resource.
func (f *Fence) Marks() []Mark {
	f.fileMu.Lock()
	defer f.fileMu.Unlock()
	return sorted(f.store.marks)
}

// Reset sets resource's mark to exactly to, lowering it if need be, and
// keeps the lock key it is bound to; to 0 forgets the resource, binding
// and all. It answers the mark as it was. Lowering a mark lets back in
// every token down to it: it is for mending a mark a made-up token raised
// (`fencelock fence reset`), never part of normal operation.
func (f *Fence) Reset(ctx context.Context, name string, to uint64) (Mark, error) {
	if f.isClosed() {
		return Mark{}, errClosed
	}
	r := f.get(name)
	if err := r.acquire(ctx); err != nil {
		return Mark{}, err
	}
	defer r.release()
	before := r.mark
	next := Mark{Resource: name, Highest: to, LastWrite: min(to, before.LastWrite), Key: before.Key, Raised: f.clock.Now()}
	if to == 0 {
		next = Mark{Resource: name}
	}
	if err := f.persist(next); err != nil {
		return before, err
	}
	r.set(next)
	return before, nil
}
