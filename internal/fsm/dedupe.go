package fsm

import (
	"encoding/binary"
	"errors"
	"strings"

	"github.com/fencelock/fencelock/internal/locktable"
)

// Idempotent retries. A write that carries a request id is remembered with
// its result, keyed by (holder, key, request id); a later command with the
// same holder, key, id and op is answered with the remembered result and
// changes nothing. The key is part of the identity so that a client that
// reuses ids across keys is never told that a call on one key succeeded
// because an earlier call on another did.
// Memory is bounded and deterministic, so every replica forgets the same
// entries at the same log position: any older than RememberFor cluster
// time, and, as it fills, the oldest of the owner that made more than
// RememberCount, or of the owner with the most once there are more than
// RememberTotal in all (before the log's first entry marked ByOwner, the
// oldest of all past RememberCount: memory.go).
//
// Wait is remembered while it is queued and once it is granted, whether
// at once or later by a hand-off from the queue: a wait re-sent with the
// same id (its client lost the answer, or moved to a new leader) keeps
// the holder's place while it is queued, and once granted is answered with
// that grant and its token, never renewed under a new one, as long as the
// grant is still the key's live lease. A grant answered that way is
// claimed: the server's release of a grant whose waiter went away names
// the wait's request id and does nothing to a claimed grant, so a grant
// that a re-sent wait answered is never released behind its holder.
// A session open and a session close are remembered with the session
// they answered: a re-sent open is answered with its session while that
// session lives (and runs again once it has ended, as an open nobody
// remembered would), and a re-sent close with what it released, not with
// no_session.
// A multi-key acquire is remembered once granted, with its leases (kept
// as batch items, so snapshots carry them unchanged): a copy re-sent or
// delivered late, after its holder released some of the keys, is answered
// with the first grant and changes nothing; running it again would take
// the released keys back and give the others new tokens behind their
// holder. A refused one is not remembered (it changed nothing).
// Extend batches are not remembered either: a
// batch result can be a thousand leases, and re-running a batch of extends
// only moves the same leases' expiries again, under the same tokens.
const (
	RememberCount = 10000
	RememberTotal = 100000
	RememberFor   = 10 * 60 * locktable.Second
)

func remembers(op Op) bool {
	switch op {
	case OpAcquire, OpRenew, OpExtend, OpRelease, OpWait, OpShared, OpSessionOpen, OpSessionClose, OpAcquireKeys:
		return true
	}
	return false
}

type remembered struct {
	id  string // holder, NUL, request id
	op  Op
	at  locktable.Time
	res Result // Op, Lease, Granted, Queued, Released, Batch, Session, Err only
	// OpWait: a re-sent wait was answered with this grant.
	claimed bool

	// Its places in the memory: among all requests, and among its owner's.
	prev, next   *remembered
	oprev, onext *remembered
	owner        *ownerMemory
}

func requestKey(c Command) string { return c.Holder + "\x00" + c.Key + "\x00" + c.RequestID }

// waitKey names a queue place: the table keeps one per (key, holder).
func waitKey(key, holder string) string { return key + "\x00" + holder }

// rememberID is c's key in the memory, or "" when c is not remembered.
// apply makes it once for recall, remember and claimedWait.
func rememberID(c Command) string {
	if c.RequestID == "" || !remembers(c.Op) {
		return ""
	}
	return requestKey(c)
}

// recall answers a retry from memory, into r. id is rememberID(c).
func (f *FSM) recall(c Command, id string, now locktable.Time, r *Result) bool {
	if id == "" {
		return false
	}
	m, ok := f.mem.get(id)
	if !ok || m.op != c.Op {
		return false
	}
	if waits(c.Op) {
		// Only a grant that is still the holder's live lease is answered;
		// a queued wait runs again (and keeps its place), and a grant
		// that ended is asked for anew.
		l, live := f.table.LeaseOf(c.Key, m.res.Lease.Holder, now)
		if !m.res.Granted || !live || l.Token != m.res.Lease.Token {
			return false
		}
		m.claimed = true
	}
	if c.Op == OpSessionOpen {
		// Answered with the session as it is now, while it lives.
		ss, live := f.table.GetSession(m.res.Session.ID, now)
		if !live || ss.Holder != c.Holder {
			return false
		}
		*r = m.res
		r.Session = ss
		r.Now, r.Duplicate = now, true
		return true
	}
	*r = m.res
	r.Now, r.Duplicate = now, true
	if c.Op == OpAcquireKeys {
		r.Batch, r.Leases = nil, make([]locktable.Lease, len(m.res.Batch))
		for i, it := range m.res.Batch {
			r.Leases[i] = it.Lease
		}
		return true
	}
	r.Batch = append([]BatchResult(nil), m.res.Batch...)
	return true
}

// remember records r for c, then forgets what is too old or too many.
// id is rememberID(c).
func (f *FSM) remember(c Command, id string, r *Result, now locktable.Time) {
	keep := id != "" && !isInputError(r.Err) && !isSessionRefusal(r.Err) && !errors.Is(r.Err, locktable.ErrKindMismatch)
	if waits(c.Op) {
		keep = keep && (r.Granted || r.Queued)
	}
	batch := r.Batch
	if c.Op == OpAcquireKeys {
		keep = keep && r.Granted
		batch = make([]BatchResult, len(r.Leases))
		for i, l := range r.Leases {
			batch[i] = BatchResult{Key: l.Key, Token: l.Token, Lease: l}
		}
	}
	if keep {
		m := &remembered{id: id, op: c.Op, at: now,
			res: Result{Op: r.Op, Lease: r.Lease, Granted: r.Granted, Queued: r.Queued, Released: r.Released, Batch: batch, Session: r.Session, Err: r.Err}}
		if r.Queued {
			m.res.Lease = locktable.Lease{Key: c.Key, Holder: c.Holder}
		}
		if old, ok := f.mem.get(m.id); ok {
			f.forget(old)
		}
		f.mem.add(m)
		if r.Queued {
			f.waits[waitKey(c.Key, c.Holder)] = m
		}
		f.trim(m.owner, now)
		return
	}
	f.trim(nil, now)
}

// trim forgets what the memory's rules drop at now, o the owner just
// added to (memory.trim).
func (f *FSM) trim(o *ownerMemory, now locktable.Time) {
	for _, m := range f.mem.trim(o, now) {
		f.unwait(m)
	}
}

// forget drops m: one about to be replaced, or a wait that ended.
func (f *FSM) forget(m *remembered) {
	f.mem.remove(m)
	f.unwait(m)
}

// unwait drops m, forgotten, from the queued waits' view.
func (f *FSM) unwait(m *remembered) {
	if m.res.Queued {
		if wk := waitKey(m.res.Lease.Key, m.res.Lease.Holder); f.waits[wk] == m {
			delete(f.waits, wk)
		}
	}
}

// waitEnded records what became of a queued wait: granted by a hand-off
// (remembered as the grant of the wait's request id), or dropped or
// cancelled (forgotten).
func (f *FSM) waitEnded(ev locktable.Event) {
	if len(f.waits) == 0 {
		return // every grant asks: spare it the key (an allocation)
	}
	wk := waitKey(ev.Key, ev.Holder)
	m := f.waits[wk]
	if m == nil {
		return
	}
	delete(f.waits, wk)
	if ev.Kind != locktable.EventGranted {
		f.forget(m)
		return
	}
	m.res = Result{Op: m.op, Granted: true, Lease: locktable.Lease{Key: ev.Key, Holder: ev.Holder, Token: ev.Token,
		Granted: ev.At, Expiry: ev.Expiry, TTL: locktable.Duration(ev.Expiry - ev.At)}}
}

// claimedWait reports whether c, a release naming a wait's request id,
// would take a grant that a re-sent wait was answered with. id is
// rememberID(c).
func (f *FSM) claimedWait(id string, c Command) bool {
	m, ok := f.mem.get(id)
	return ok && waits(m.op) && m.claimed && m.res.Lease.Token == c.Token
}

// UnclaimedWaitGrant returns the request id of the wait that was handed
// token on key for holder, if no re-sent wait has been answered with it
// yet: a release naming that id releases it only while that holds.
func (f *FSM) UnclaimedWaitGrant(key, holder string, token uint64) (string, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	prefix := holder + "\x00" + key + "\x00"
	o := f.mem.owners[locktable.OwnerOf(holder)]
	if o == nil {
		return "", false
	}
	for m := o.head; m != nil; m = m.onext {
		if waits(m.op) && m.res.Granted && !m.claimed && m.res.Lease.Token == token &&
			m.res.Lease.Key == key && m.res.Lease.Holder == holder && strings.HasPrefix(m.id, prefix) {
			return m.id[len(prefix):], true
		}
	}
	return "", false
}

func isInputError(err error) bool {
	var in *locktable.InputError
	return errors.As(err, &in) || errors.Is(err, ErrBadCommand)
}

// Encoding of the memory in a snapshot, oldest first:
//
//	[uvarint rememberByOwnerMark] | uvarint count | each: string id | byte op | varint at | result
//	result: byte flags (1 granted, 2 released, 4 claimed, 8 queued, 16 session) | error | byte has lease | [lease] |
//	        uvarint batch | each: string key | uvarint token | error | byte has lease | [lease] |
//	        [session, when flag 16: uvarint id | string holder | varint ttl | varint created | varint expiry |
//	        uvarint locks | uvarint waiting]
//	error:  byte 0 none, 1 held (then lease), 2 not held
//	lease:  string key | string holder | uvarint token | varint granted | varint expiry | varint ttl
//
// Flag 16 is set only for a session open or close, which snapshots made
// before they were remembered never hold. The mark, a count no snapshot
// can hold, says that the memory is kept by owner (the log had reached
// its first entry marked ByOwner); snapshots from before it never have one,
// and restore to the rules they were made under.
const rememberByOwnerMark = 1 << 40

const (
	errNone    = 0
	errHeld    = 1
	errNotHeld = 2
)

func appendRemembered(b []byte, mem *memory) []byte {
	if mem.byOwner {
		b = binary.AppendUvarint(b, rememberByOwnerMark)
	}
	b = binary.AppendUvarint(b, uint64(mem.Len()))
	for m := mem.head; m != nil; m = m.next {
		b = appendString(b, m.id)
		b = append(b, byte(m.op))
		b = binary.AppendVarint(b, int64(m.at))
		var flags byte
		if m.res.Granted {
			flags |= 1
		}
		if m.res.Released {
			flags |= 2
		}
		if m.claimed {
			flags |= 4
		}
		if m.res.Queued {
			flags |= 8
		}
		if sessionOp(m.op) {
			flags |= 16
		}
		b = append(b, flags)
		b = appendErr(b, m.res.Err)
		b = appendOptLease(b, m.res.Lease)
		b = binary.AppendUvarint(b, uint64(len(m.res.Batch)))
		for _, it := range m.res.Batch {
			b = appendString(b, it.Key)
			b = binary.AppendUvarint(b, it.Token)
			b = appendErr(b, it.Err)
			b = appendOptLease(b, it.Lease)
		}
		if sessionOp(m.op) {
			b = appendSession(b, m.res.Session)
		}
	}
	return b
}

// sessionOp reports the remembered ops whose result is a session.
func sessionOp(op Op) bool { return op == OpSessionOpen || op == OpSessionClose }

func appendSession(b []byte, ss locktable.Session) []byte {
	b = binary.AppendUvarint(b, ss.ID)
	b = appendString(b, ss.Holder)
	b = binary.AppendVarint(b, int64(ss.TTL))
	b = binary.AppendVarint(b, int64(ss.Created))
	b = binary.AppendVarint(b, int64(ss.Expiry))
	b = binary.AppendUvarint(b, uint64(ss.Locks))
	return binary.AppendUvarint(b, uint64(ss.Waiting))
}

func readSession(r *reader) locktable.Session {
	ss := locktable.Session{ID: r.Uvarint(), Holder: r.String(locktable.MaxHolderLen), TTL: locktable.Duration(r.Varint()),
		Created: locktable.Time(r.Varint()), Expiry: locktable.Time(r.Varint())}
	locks, waiting := r.Uvarint(), r.Uvarint()
	if r.Err() == nil && (locks > locktable.MaxSessionLocks || waiting > locktable.MaxSessionLocks) {
		r.fail("session of %d locks and %d places", locks, waiting)
		return locktable.Session{}
	}
	ss.Locks, ss.Waiting = int(locks), int(waiting)
	return ss
}

func appendErr(b []byte, err error) []byte {
	var held *locktable.HeldError
	switch {
	case err == nil:
		return append(b, errNone)
	case errors.As(err, &held):
		return appendLease(append(b, errHeld), held.Lease)
	default: // only refusals are remembered
		return append(b, errNotHeld)
	}
}

func appendOptLease(b []byte, l locktable.Lease) []byte {
	if l == (locktable.Lease{}) {
		return append(b, 0)
	}
	return appendLease(append(b, 1), l)
}

func appendLease(b []byte, l locktable.Lease) []byte {
	b = appendString(b, l.Key)
	b = appendString(b, l.Holder)
	b = binary.AppendUvarint(b, l.Token)
	b = binary.AppendVarint(b, int64(l.Granted))
	b = binary.AppendVarint(b, int64(l.Expiry))
	return binary.AppendVarint(b, int64(l.TTL))
}

const maxRequestKey = locktable.MaxHolderLen + 1 + MaxRequestIDLen

func readRemembered(r *reader) memory {
	mem := newMemory()
	n, most := r.Uvarint(), uint64(RememberCount)
	if r.Err() == nil && n == rememberByOwnerMark {
		mem.byOwner, most = true, RememberTotal
		n = r.Uvarint()
	}
	// Each entry takes at least 6 bytes, which bounds n before allocating.
	if r.Err() == nil && (n > most || n > uint64(r.Len())/6) {
		r.fail("%d remembered requests", n)
	}
	for i := uint64(0); i < n && r.Err() == nil; i++ {
		m := &remembered{id: r.String(maxRequestKey), op: Op(r.Byte()), at: locktable.Time(r.Varint())}
		flags := r.Byte()
		m.res.Op = m.op
		m.res.Granted, m.res.Released = flags&1 != 0, flags&2 != 0
		m.claimed, m.res.Queued = flags&4 != 0, flags&8 != 0
		m.res.Err = readErr(r)
		m.res.Lease = readOptLease(r)
		nb := r.Uvarint()
		if r.Err() == nil && (nb > MaxBatch || nb > uint64(r.Len())/4) {
			r.fail("batch of %d", nb)
		}
		for j := uint64(0); j < nb && r.Err() == nil; j++ {
			it := BatchResult{Key: r.String(locktable.MaxKeyLen), Token: r.Uvarint()}
			it.Err = readErr(r)
			it.Lease = readOptLease(r)
			m.res.Batch = append(m.res.Batch, it)
		}
		if flags&16 != 0 {
			m.res.Session = readSession(r)
		}
		if r.Err() != nil {
			break
		}
		_, dup := mem.get(m.id)
		bad := !remembers(m.op) || dup
		switch {
		case waits(m.op):
			bad = bad || flags > 15 || flags&2 != 0 || flags&(1|8) == 0
		case sessionOp(m.op):
			bad = bad || flags != 16
		default:
			bad = bad || flags > 3
		}
		if bad {
			r.fail("bad remembered request %d", i)
			break
		}
		mem.add(m)
		if mem.byOwner && m.owner.n > RememberCount {
			r.fail("more than %d remembered requests of %q", RememberCount, m.owner.name)
			break
		}
	}
	return mem
}

func readErr(r *reader) error {
	switch r.Byte() {
	case errNone:
		return nil
	case errHeld:
		return &locktable.HeldError{Lease: readLease(r)}
	case errNotHeld:
		return locktable.ErrNotHeld
	}
	r.fail("bad error kind")
	return nil
}

func readOptLease(r *reader) locktable.Lease {
	switch r.Byte() {
	case 0:
		return locktable.Lease{}
	case 1:
		return readLease(r)
	}
	r.fail("bad lease flag")
	return locktable.Lease{}
}

func readLease(r *reader) locktable.Lease {
	return locktable.Lease{Key: r.String(locktable.MaxKeyLen), Holder: r.String(locktable.MaxHolderLen),
		Token: r.Uvarint(), Granted: locktable.Time(r.Varint()), Expiry: locktable.Time(r.Varint()),
		TTL: locktable.Duration(r.Varint())}
}
