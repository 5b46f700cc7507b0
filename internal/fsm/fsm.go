package fsm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"sync"
	"sync/atomic"

	"github.com/fencelock/fencelock/internal/acl"
	"github.com/fencelock/fencelock/internal/binread"
	"github.com/fencelock/fencelock/internal/locktable"
)

// Result is Apply's answer to one command. Err holds a refusal
// (*locktable.HeldError, locktable.ErrNotHeld, *locktable.InputError,
// *locktable.QueueFullError), ErrClockStep or ErrBadCommand; the other fields are meaningful only when Err is nil.
type Result struct {
	Op        Op
	Index     uint64         // the log index of the entry
	Now       locktable.Time // the effective cluster time of the apply
	Lease     locktable.Lease
	Granted   bool // acquire, wait, renew: Lease was granted by this command
	Queued    bool // wait: the holder is in the key's queue
	Released  bool // release
	Cancelled int  // cancel-wait(s): how many waiters left a queue
	Batch     []BatchResult
	Session   locktable.Session // session ops
	Leases    []locktable.Lease // acquire-keys: one per key, in order
	Err       error
	// Duplicate: the command repeated the (holder, request id) of an
	// earlier one; this is that command's result and nothing was applied.
	Duplicate bool
}

// BatchResult is one item of an extend batch.
type BatchResult struct {
	Key   string
	Token uint64
	Lease locktable.Lease
	Err   error
}

// Observer receives every table event with the log index of the entry that
// caused it. It runs synchronously inside Apply, under the FSM's lock: it
// must not block and must not call back into the FSM.
type Observer func(index uint64, ev locktable.Event)

// FSM is the replicated state machine around a lock table. Apply,
// ApplyBatch, Snapshot and Restore are called by the engine that drives
// it, in log order from one goroutine; the read methods may be called
// from any goroutine. It names no raft engine: each engine adapts its own
// log entries to Entry.
type FSM struct {
	mu      sync.RWMutex
	table   *locktable.Table
	now     locktable.Time // the largest effective time applied
	index   uint64         // the last applied index
	observe Observer
	changed chan struct{}
	mem     memory                    // answers kept for retries (dedupe.go)
	waits   map[string]*remembered    // queued waits by waitKey, a view of mem
	members map[string]Member         // by node id
	cluster string                    // the cluster id; "" until the first leader sets it
	acls    atomic.Pointer[acl.State] // replaced whole on each change, under mu
	// aclIndex is the index of the entry that made acls (or, after a
	// restore, of the snapshot: no later than that); aclChanged is
	// closed, and replaced, when acls is.
	aclIndex   uint64
	aclChanged chan struct{}
	// applied, when not nil, is closed by the next apply or restore
	// (WaitApplied).
	applied chan struct{}
	// onApplied, when not nil, runs after each Apply and ApplyBatch
	// (OnApplied).
	onApplied func()
	// byOwner mirrors mem.byOwner (set under mu) for RemembersByOwner,
	// which every proposal asks: a read lock there waited for each
	// batch being applied.
	byOwner atomic.Bool
	// unanswered is where ApplyBatch applies a batch of Unanswered
	// entries, one after another, under mu.
	unanswered Result
}

// New returns an FSM over an empty table. observe may be nil.
func New(observe Observer) *FSM {
	f := &FSM{table: locktable.New(), observe: observe, changed: make(chan struct{}, 1), mem: newMemory(),
		waits: map[string]*remembered{}, members: map[string]Member{}, aclChanged: make(chan struct{})}
	f.acls.Store(acl.Empty())
	f.table.SetObserver(f.emit)
	return f
}

// OnApplied sets fn to run after each Apply and ApplyBatch, once every
// event of the entries applied has reached the observer: the observer's
// batch is complete (the service publishes its watch events then). fn
// runs under the state machine's lock, on the applying goroutine: it must
// not block or call back into f. Set it before the first apply.
func (f *FSM) OnApplied(fn func()) { f.onApplied = fn }

func (f *FSM) emit(ev locktable.Event) {
	if ev.Kind == locktable.EventGranted || ev.Kind == locktable.EventWaitDropped {
		f.waitEnded(ev)
	}
	if f.observe != nil {
		if ev.At == 0 {
			ev.At = f.now // a cancelled wait: CancelWait is given no time
		}
		f.observe(f.index, ev)
	}
}

// Changed receives a value after an apply or restore that may have moved
// NextDeadline. It never blocks the FSM: several changes may coalesce.
func (f *FSM) Changed() <-chan struct{} { return f.changed }

func (f *FSM) poke() {
	select {
	case f.changed <- struct{}{}:
	default:
	}
}

// Entry is one committed log entry, as an engine hands it over: its index
// and term, and the encoded command (Encode). An entry with no data carries
// no command (a barrier, an engine's own no-op): it is answered with its
// index alone and changes nothing, not even the applied index.
//
// Unanswered says that nobody waits for the entry's Result: an entry a
// restart replays, proposed before the node opened its log. It is applied
// exactly as any other (the request-id memory keeps what it would);
// only its Result is not kept (ApplyBatch).
type Entry struct {
	Index, Term uint64
	Data        []byte
	Unanswered  bool
}

// Apply runs the committed entry at index (of term) whose data is an
// encoded command. It always returns a *Result.
func (f *FSM) Apply(index, term uint64, data []byte) *Result {
	r := new(Result)
	if len(data) == 0 {
		r.Index = index
		return r
	}
	cmd, err := Decode(data)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.applyDecoded(index, cmd, err, r) {
		f.poke()
	}
	f.wakeApplied()
	if f.onApplied != nil {
		f.onApplied()
	}
	return r
}

// ApplyBatch runs committed entries in order under one hold of the lock,
// answering each with the Result that Apply would have, in one
// allocation; or, when every entry is Unanswered, with nil: a restart's
// replay of a million entries built a 280-byte Result for each that
// nobody read (docs/BENCHMARKS.md, issue 45). each, when not nil, is
// called after every entry that carries a command (the server times
// entries with it); it runs under the lock: it must not block or call
// back into f.
func (f *FSM) ApplyBatch(ents []Entry, each func()) []Result {
	var res []Result
	for _, e := range ents {
		if !e.Unanswered {
			res = make([]Result, len(ents))
			break
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	ran := false
	for i, e := range ents {
		r := &f.unanswered
		if res != nil {
			r = &res[i]
		} else {
			*r = Result{}
		}
		if len(e.Data) == 0 {
			r.Index = e.Index
			continue
		}
		cmd, err := Decode(e.Data)
		if f.applyDecoded(e.Index, cmd, err, r) {
			ran = true
		}
		if each != nil {
			each()
		}
	}
	f.unanswered = Result{} // holds nothing past the batch
	if ran {
		f.poke()
	}
	f.wakeApplied()
	if f.onApplied != nil {
		f.onApplied()
	}
	return res
}

// applyDecoded runs the command of entry index into r, a zero Result,
// under the lock. It reports whether the command ran: an entry that did
// not decode moves only the applied index.
func (f *FSM) applyDecoded(index uint64, cmd Command, err error, r *Result) bool {
	f.index = index
	if err != nil {
		*r = Result{Index: index, Now: f.now, Err: err}
		return false
	}
	f.apply(cmd, r)
	r.Index = index
	return true
}

// ApplyCommand is Apply for a command that is not in a log yet (tests,
// and tools that replay commands). index is reported to the observer.
func (f *FSM) ApplyCommand(index uint64, cmd Command) *Result {
	data, err := Encode(cmd)
	if err != nil {
		return &Result{Index: index, Err: err}
	}
	return f.Apply(index, 0, data)
}

// apply runs c into r, a zero Result.
func (f *FSM) apply(c Command, r *Result) {
	if err := f.checkStamp(c.Now); err != nil {
		r.Op, r.Now, r.Err = c.Op, f.now, err
		return
	}
	if c.Now > f.now {
		f.now = c.Now
	}
	if c.ByOwner {
		f.mem.byOwner = true
		f.byOwner.Store(true)
	}
	now := f.now
	id := rememberID(c)
	if f.recall(c, id, now, r) {
		return
	}
	t := f.table
	r.Op, r.Now = c.Op, now
	defer f.remember(c, id, r, now)
	switch c.Op {
	case OpAcquire:
		r.Lease, r.Err = t.AcquireWith(c.Key, c.Holder, now, c.TTL, grantOptions(c))
		r.Granted = r.Err == nil
	case OpWait:
		lim := locktable.WaitLimits{PerKey: c.MaxKeyWaiters, Total: c.MaxWaiters, PerKeyOwner: c.MaxOwnerKeyWaiters}
		r.Lease, r.Granted, r.Err = t.WaitWith(c.Key, c.Holder, now, c.TTL, c.Deadline, lim, grantOptions(c))
		r.Queued = r.Err == nil && !r.Granted
	case OpRenew:
		r.Lease, r.Err = t.Renew(c.Key, c.Holder, now, c.TTL)
		r.Granted = r.Err == nil
	case OpCancelWait:
		if t.CancelWaitAt(c.Key, c.Holder, now) {
			r.Cancelled = 1
			f.waitEnded(locktable.Event{Key: c.Key, Holder: c.Holder})
		}
	case OpCancelWaits:
		for _, it := range c.Items {
			if t.CancelWaitAt(it.Key, it.Holder, now) {
				r.Cancelled++
				f.waitEnded(locktable.Event{Key: it.Key, Holder: it.Holder})
			}
		}
	case OpRelease:
		if c.RequestID != "" && c.Token != 0 && f.claimedWait(id, c) {
			break // a re-sent wait was answered with this grant: it is held
		}
		if c.Token == 0 {
			r.Released, r.Err = t.Release(c.Key, c.Holder, now)
		} else {
			r.Released, r.Err = t.ReleaseToken(c.Key, c.Holder, c.Token, now)
		}
	case OpExtend:
		r.Lease, r.Err = t.Extend(c.Key, c.Holder, c.Token, now, c.TTL)
	case OpExtendBatch:
		r.Batch = make([]BatchResult, len(c.Items))
		for i, it := range c.Items {
			l, err := t.Extend(it.Key, c.Holder, it.Token, now, c.TTL)
			r.Batch[i] = BatchResult{Key: it.Key, Token: it.Token, Lease: l, Err: err}
		}
	case OpTick:
		t.Tick(now)
	case OpMember:
		f.applyMember(c)
	case OpClusterID:
		if f.cluster == "" {
			f.cluster = c.ClusterID
		}
	case OpTokenFloor:
		t.RaiseLastToken(c.Token)
	case OpACL:
		r.Err = f.applyACL(c.ACL)
	case OpSessionOpen, OpSessionExtend, OpSessionClose, OpAcquireKeys:
		f.applySession(c, r, now)
	case OpShared:
		f.applyShared(c, r, now)
	default:
		r.Err = fmt.Errorf("%w: unknown op %d", ErrBadCommand, c.Op)
	}
}

// Now is the largest cluster time applied so far. A new leader resumes its
// clock from here.
func (f *FSM) Now() locktable.Time {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.now
}

// RemembersByOwner reports whether the log has reached its first entry
// marked ByOwner: the request-id memory is kept by owner.
func (f *FSM) RemembersByOwner() bool { return f.byOwner.Load() }

// LastToken is the last fencing token issued.
func (f *FSM) LastToken() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.table.LastToken()
}

// wakeApplied wakes WaitApplied's callers; under the lock.
func (f *FSM) wakeApplied() {
	if f.applied != nil {
		close(f.applied)
		f.applied = nil
	}
}

// WaitApplied blocks until the entry at index has been applied (or a
// snapshot at or past it restored), or done is closed; it reports
// whether the entry was applied.
func (f *FSM) WaitApplied(index uint64, done <-chan struct{}) bool {
	for {
		f.mu.Lock()
		if f.index >= index {
			f.mu.Unlock()
			return true
		}
		if f.applied == nil {
			f.applied = make(chan struct{})
		}
		ch := f.applied
		f.mu.Unlock()
		select {
		case <-ch:
		case <-done:
			return false
		}
	}
}

// AppliedIndex is the index of the last entry applied.
func (f *FSM) AppliedIndex() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.index
}

// Get returns key's lease if it is alive at now.
func (f *FSM) Get(key string, now locktable.Time) (locktable.Lease, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.table.Get(key, now)
}

// Check reports whether token is key's current token and alive at now.
func (f *FSM) Check(key string, token uint64, now locktable.Time) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.table.Check(key, token, now)
}

// EachLive calls fn with the key of every lease alive at now, in key
// order, under the read lock (fn must not call back into f).
func (f *FSM) EachLive(now locktable.Time, fn func(key string)) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	f.table.EachLive(now, fn)
}

// Waiters returns the holders queued on key, head first.
func (f *FSM) Waiters(key string) []string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.table.Waiters(key)
}

// QueuedCount is the number of waiters in all queues.
func (f *FSM) QueuedCount() int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.table.QueuedCount()
}

// ListAfter is List of the keys after after. Its cost under the lock is
// O(log n + limit).
func (f *FSM) ListAfter(prefix, after string, now locktable.Time, limit int) []locktable.Lease {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.table.ListAfter(prefix, after, now, limit)
}

// QueuedWaiters returns every queued waiter.
func (f *FSM) QueuedWaiters() []locktable.Queued {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.table.QueuedWaiters()
}

// NextDeadline is the earliest time at which a Tick has work to do.
func (f *FSM) NextDeadline() (locktable.Time, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.table.NextDeadline()
}

// Snapshot format: "FLS1" | varint now | uvarint index | uvarint len |
// table encoding (which carries its own checksum) | remembered requests |
// members (absent when there are none and no cluster id, as in snapshots
// from before clustering) | cluster id (a string; absent until one is
// set, as in snapshots from before it existed, unless ACL tables follow,
// when it may be "") | ACL tables (absent until bootstrapped) | CRC-32 of
// all before.
const snapshotMagic = "FLS1"

// Snapshot encodes the state under the lock; the Snapshot's WriteTo only
// writes bytes, and may run on another goroutine while entries apply.
func (f *FSM) Snapshot() *Snapshot {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return &Snapshot{parts: f.marshalParts()}
}

// marshalParts encodes the state as three pieces whose concatenation is
// the snapshot: a small header, the table's encoding, and a small tail with
// the checksum of all three. Keeping the table's bytes as they come saves
// copying what can be tens of megabytes into one buffer.
func (f *FSM) marshalParts() [][]byte {
	tbl, _ := f.table.MarshalBinary() // never fails
	head := []byte(snapshotMagic)
	head = binary.AppendVarint(head, int64(f.now))
	head = binary.AppendUvarint(head, f.index)
	head = binary.AppendUvarint(head, uint64(len(tbl)))
	tail := appendRemembered(nil, &f.mem)
	acls := f.acls.Load().On
	if len(f.members) > 0 || f.cluster != "" || acls {
		tail = appendMembers(tail, f.members)
	}
	if f.cluster != "" || acls {
		tail = appendString(tail, f.cluster)
	}
	if acls {
		tail = appendACLState(tail, f.acls.Load())
	}
	sum := crc32.ChecksumIEEE(head)
	sum = crc32.Update(sum, crc32.IEEETable, tbl)
	sum = crc32.Update(sum, crc32.IEEETable, tail)
	tail = binary.LittleEndian.AppendUint32(tail, sum)
	return [][]byte{head, tbl, tail}
}

func (f *FSM) marshal() []byte { return bytes.Join(f.marshalParts(), nil) }

// MarshalBinary is the snapshot encoding of the current state.
func (f *FSM) MarshalBinary() ([]byte, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.marshal(), nil
}

// ErrCorruptSnapshot: Restore could not decode a snapshot.
var ErrCorruptSnapshot = errors.New("fsm: corrupt snapshot")

// maxSnapshot bounds what Restore reads into memory.
const maxSnapshot = 1 << 30

// Restore replaces all state with the snapshot read from r (the caller
// closes it). On error the state is left as it was.
func (f *FSM) Restore(r io.Reader) error {
	data, err := io.ReadAll(io.LimitReader(r, maxSnapshot+1))
	if err != nil {
		return fmt.Errorf("fsm: reading snapshot: %w", err)
	}
	return f.UnmarshalBinary(data)
}

// UnmarshalBinary replaces all state with an encoding from MarshalBinary.
func (f *FSM) UnmarshalBinary(data []byte) error {
	if len(data) > maxSnapshot || len(data) < len(snapshotMagic)+4 {
		return fmt.Errorf("%w: %d bytes", ErrCorruptSnapshot, len(data))
	}
	body, sum := data[:len(data)-4], binary.LittleEndian.Uint32(data[len(data)-4:])
	if crc32.ChecksumIEEE(body) != sum || string(body[:len(snapshotMagic)]) != snapshotMagic {
		return fmt.Errorf("%w: bad checksum or magic", ErrCorruptSnapshot)
	}
	r := reader{binread.New(body[len(snapshotMagic):])}
	now := locktable.Time(r.Varint())
	index := r.Uvarint()
	table := r.Bytes(r.Len())
	if r.Err() != nil {
		return fmt.Errorf("%w: bad header", ErrCorruptSnapshot)
	}
	t := locktable.New()
	if err := t.UnmarshalBinary(table); err != nil {
		return fmt.Errorf("%w: %w", ErrCorruptSnapshot, err)
	}
	mem := readRemembered(&r)
	members := map[string]Member{}
	cluster := ""
	acls := acl.Empty()
	if r.Err() == nil && r.Len() > 0 {
		members = readMembers(&r)
		if r.Err() == nil && r.Len() > 0 {
			if cluster = r.String(MaxClusterIDLen); cluster == "" && r.Len() == 0 {
				r.fail("empty cluster id")
			}
		}
		if r.Err() == nil && r.Len() > 0 {
			acls = readACLState(&r)
		}
		if r.Err() == nil && len(members) == 0 && cluster == "" && !acls.On {
			r.fail("empty member list")
		}
	}
	if r.Err() != nil {
		return fmt.Errorf("%w: %w", ErrCorruptSnapshot, r.failure())
	}
	if r.Len() != 0 {
		return fmt.Errorf("%w: %d trailing bytes", ErrCorruptSnapshot, r.Len())
	}
	if t.MaxNow() > now {
		now = t.MaxNow()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	t.SetObserver(f.emit)
	f.table, f.now, f.index = t, now, index
	f.mem = mem
	f.byOwner.Store(mem.byOwner)
	f.waits = map[string]*remembered{}
	for m := mem.head; m != nil; m = m.next {
		if m.res.Queued {
			f.waits[waitKey(m.res.Lease.Key, m.res.Lease.Holder)] = m
		}
	}
	f.members, f.cluster = members, cluster
	f.acls.Store(acls)
	f.aclIndex = index
	f.aclSwapped()
	f.poke()
	f.wakeApplied()
	return nil
}

// Snapshot is the state as it was when Snapshot was called, encoded.
type Snapshot struct{ parts [][]byte }

// WriteTo writes the encoding to w (io.WriterTo).
func (s *Snapshot) WriteTo(w io.Writer) (int64, error) {
	var n int64
	for _, p := range s.parts {
		m, err := w.Write(p)
		n += int64(m)
		if err != nil {
			return n, fmt.Errorf("fsm: writing snapshot: %w", err)
		}
	}
	return n, nil
}

// Len is the encoding's length in bytes.
func (s *Snapshot) Len() int64 {
	var n int64
	for _, p := range s.parts {
		n += int64(len(p))
	}
	return n
}
