package locktable

import (
	"container/heap"
	"errors"
	"math"
	"sort"
	"strings"

	"github.com/google/btree"

	"github.com/fencelock/fencelock/internal/plant"
)

// Time is an instant on the caller's clock, in nanoseconds. The table never
// reads a clock: every call that depends on time is given one.
type Time int64

// Duration is a span of Time, in nanoseconds.
type Duration int64

// Common durations, so callers need not import package time to write one.
const (
	Millisecond Duration = 1e6
	Second      Duration = 1e9
)

const maxTime = Time(math.MaxInt64)

// NoDeadline is a waiter deadline that never passes.
const NoDeadline = maxTime

// Lease is one grant: who holds key, under which token, until when.
type Lease struct {
	Key     string
	Holder  string
	Token   uint64
	Granted Time     // when this token was issued
	Expiry  Time     // alive while now < Expiry
	TTL     Duration // the ttl of the grant or of the last Extend
	// Multi-holder keys: the key's kind, a semaphore's limit,
	// and whether a read/write lock's holder is its writer.
	Kind    Kind
	Permits int
	Write   bool
	// Slot is a semaphore holder's permit, 1..Permits: the lowest free one
	// at its grant, kept by its renewals. A resource fences each slot as
	// an exclusive lock (docs/PRIMITIVES.md).
	Slot int
	// Session is the id of the session the lease is held under (0: none);
	// Expiry and TTL are then the session's.
	Session uint64
}

// Remaining is how long the lease has left at now (0 once expired).
func (l Lease) Remaining(now Time) Duration {
	if now >= l.Expiry {
		return 0
	}
	return Duration(l.Expiry - now)
}

type waiter struct {
	holder   string
	ttl      Duration
	since    Time     // when it joined the queue
	deadline Time     // it leaves the queue at now >= deadline
	sess     *session // granted under this session; nil: its own ttl
	delay    Duration // the lock-delay its grant takes
}

// entry is everything the table knows about one key. It exists while the
// key has a lease record or a waiter. The layout fits the 64-byte size
// class because a server may hold millions of these: the lease's fields
// are kept without its Key (key is the same string), the holder as a
// pointer to its interned name, and the rare waiters in Table.waiting.
type entry struct {
	key     string
	holder  *holderRef // the lease record's holder; nil when there is none
	token   uint64
	granted Time
	expiry  Time
	ttl     Duration
	heapIdx int32 // position in Table.expiries, -1 when not held
	queued  bool  // Table.waiting holds this key's waiters
	multi   bool  // a semaphore or read/write key, or one of its holders
	// homeBits are the bits of the key's hash that place the entry in
	// its group of Table.keys (keyindex.go): a group that grows moves
	// its entries without hashing their keys again. They fill the bytes
	// the fields above leave free in the 64.
	homeBits uint16
}

// held reports whether e has a lease record (alive or not).
func (e *entry) held() bool { return e.holder != nil }

func (e *entry) alive(now Time) bool { return now < e.end() }

// end is when e's lease ends: its own expiry, or its session's.
func (e *entry) end() Time {
	if e.holder != nil && e.holder.sess != nil {
		return e.holder.sess.expiry
	}
	return e.expiry
}

// lease is e's lease record (the zero Lease but for Key when not held). A
// lock under a session reports the session's expiry and ttl.
func (e *entry) lease() Lease {
	l := Lease{Key: e.key, Token: e.token, Granted: e.granted, Expiry: e.expiry, TTL: e.ttl}
	if e.holder != nil {
		l.Holder = e.holder.name
		if s := e.holder.sess; s != nil {
			l.Expiry, l.TTL, l.Session = s.expiry, s.ttl, s.id
		}
	}
	return l
}

// waitQueue is the FIFO queue of one key that has waiters.
type waitQueue struct {
	waiters []waiter
}

// queueOf is e's wait queue, nil when nobody waits.
func (t *Table) queueOf(e *entry) *waitQueue {
	if !e.queued {
		return nil
	}
	return t.waiting[e.key]
}

// waitersOf is e's queue, head first.
func (t *Table) waitersOf(e *entry) []waiter {
	if q := t.queueOf(e); q != nil {
		return q.waiters
	}
	return nil
}

// forgetIfEmpty forgets q, e's queue, once nobody is left in it.
func (t *Table) forgetIfEmpty(e *entry, q *waitQueue) {
	if len(q.waiters) == 0 {
		delete(t.waiting, e.key)
		e.queued = false
	}
}

// setWaiters makes ws e's queue; an empty one forgets it.
func (t *Table) setWaiters(e *entry, ws []waiter) {
	t.queued += len(ws) - len(t.waitersOf(e))
	if len(ws) == 0 {
		if e.queued {
			delete(t.waiting, e.key)
			e.queued = false
		}
		return
	}
	if e.queued {
		t.waiting[e.key].waiters = ws
		return
	}
	t.waiting[e.key] = &waitQueue{waiters: ws}
	e.queued = true
}

// holderRef is one interned holder name and how many leases carry it. A
// service usually holds many locks under one name; sharing the string
// saves a copy per lease.
type holderRef struct {
	name string
	n    int
	sess *session // set on a session's own ref, never on an interned one
}

// Table is the lock table. The zero value is not ready; use New.
type Table struct {
	keys     keyIndex // every entry, by its key
	expiries expiryHeap
	waiting  map[string]*waitQueue // keys with at least one waiter
	holders  map[string]*holderRef
	owners   map[string]*OwnerCount // by OwnerOf(holder)
	// idleOwners counts the owners entries with nothing.
	idleOwners int
	unused     int    // holders entries whose n is 0
	last       uint64 // the last token issued; 0 before the first
	maxNow     Time   // the largest now ever passed in
	queued     int    // waiters in all queues
	observe    func(Event)
	sessions   *sessionTable        // nil until the first session
	delays     map[*entry]Duration  // held leases that take a lock-delay
	delayed    map[string]Time      // keys granted to nobody until then
	multi      map[string]*multiKey // semaphores and read/write locks; nil until one
	// index orders the entries by key, for List and snapshots: it holds
	// exactly the entries of keys, so a lease that passes from holder to waiter
	// costs it nothing. A B-tree is a pure data structure: it reads no clock, does no I/O,
	// and two tables fed the same calls hold the same tree.
	index *btree.BTreeG[*entry]
	// visit, when set (by tests), is called for each entry List looks at.
	// List only reads the table, so that concurrent readers may call it.
	visit func()
}

// indexDegree is the B-tree's degree: nodes of up to 63 keys, a few
// cache lines of pointers, shallow (4 levels for a million keys).
const indexDegree = 32

func byKey(a, b *entry) bool { return a.key < b.key }

// New returns an empty table whose first grant will carry token 1.
func New() *Table {
	return &Table{keys: newKeyIndex(), waiting: map[string]*waitQueue{}, holders: map[string]*holderRef{}, owners: map[string]*OwnerCount{},
		index: btree.NewG(indexDegree, byKey)}
}

// SetObserver registers fn to be called, synchronously and in order, with
// every event the table produces (grants, releases, expiries, waiters
// joining, cancelling and dropped). It replaces any earlier observer; nil removes it.
func (t *Table) SetObserver(fn func(Event)) { t.observe = fn }

// LastToken is the last token issued (0 if none): the next grant carries
// LastToken()+1.
func (t *Table) LastToken() uint64 { return t.last }

// MaxNow is the largest now any call has passed in, including through a
// restored snapshot. A replicated caller resumes its clock from here.
func (t *Table) MaxNow() Time { return t.maxNow }

// Len is the number of keys with a lease record or a waiter.
func (t *Table) Len() int { return t.keys.len() }

// Acquire grants key to holder for ttl when the key is free, its lease has
// expired, or holder already holds it (a renewal, which issues a new token).
// A refusal returns a *HeldError and changes nothing.
func (t *Table) Acquire(key, holder string, now Time, ttl Duration) (Lease, error) {
	return t.AcquireWith(key, holder, now, ttl, Options{})
}

// Renew is Acquire for a holder that already holds key: holder's lease,
// alive at now, is granted again for ttl under a new token that supersedes
// the old one. When key has no live lease of holder's, Renew returns
// ErrNotHeld and changes nothing: a renewal is for a holder that never lost
// the key, and granting a free or expired one would hide that its lease
// ended and that another holder may have had the key in between.
func (t *Table) Renew(key, holder string, now Time, ttl Duration) (Lease, error) {
	if err := validateGrant(key, holder, now, ttl); err != nil {
		return Lease{}, err
	}
	if l, ok := t.Get(key, now); !ok || l.Holder != holder {
		return Lease{}, ErrNotHeld
	}
	return t.Acquire(key, holder, now, ttl)
}

// AcquireWith is Acquire with Options: under a session, with a lock-delay.
// A key in its lock-delay is refused with a *LockDelayError.
func (t *Table) AcquireWith(key, holder string, now Time, ttl Duration, o Options) (Lease, error) {
	g, err := t.prepare(key, holder, now, ttl, o)
	if err != nil {
		return Lease{}, err
	}
	if err := t.grantable(key, holder, now); err != nil {
		return Lease{}, err
	}
	if o.Session != 0 && plant.On("session-renewal-refused") {
		if l, ok := t.Get(key, now); ok && l.Holder == holder {
			return Lease{}, &HeldError{Lease: l}
		}
	}
	if t.sessionFull(g, key) {
		return Lease{}, &SessionLimitError{Scope: "session", Limit: MaxSessionLocks}
	}
	e := t.keys.get(key)
	if e == nil {
		e = t.newEntry(key)
	}
	return t.grant(e, holder, now, g.ttl, now, g), nil
}

// Wait is Acquire that queues instead of refusing. When the key can be
// granted now it is, and Wait answers (lease, true). Otherwise holder joins
// the back of the key's FIFO queue (or keeps its place if it is already
// queued, taking the new ttl and deadline) and Wait answers (Lease{}, false);
// the grant arrives later as an EventGranted when the lease before it is
// released or expires. A waiter leaves the queue at now >= deadline; a
// deadline that has already passed refuses at once with a *HeldError.
func (t *Table) Wait(key, holder string, now Time, ttl Duration, deadline Time) (Lease, bool, error) {
	return t.WaitWithin(key, holder, now, ttl, deadline, WaitLimits{})
}

// WaitLimits caps the wait queues; a zero field is no cap.
type WaitLimits struct {
	PerKey int // waiters in one key's queue
	Total  int // waiters in all queues
	// PerKeyOwner caps the waiters of one owner (OwnerOf) in one key's
	// queue, so that one principal cannot take a key's whole queue.
	PerKeyOwner int
}

// ownerWaiting counts the holders of owner among waiters.
func ownerWaiting(waiters []waiter, owner string) int {
	n := 0
	for i := range waiters {
		if OwnerOf(waiters[i].holder) == owner {
			n++
		}
	}
	return n
}

// WaitWithin is Wait that refuses, with a *QueueFullError and changing
// nothing, a holder that would join a queue already at a limit. A holder
// already queued keeps its place (and takes the new ttl and deadline)
// whatever the limits.
func (t *Table) WaitWithin(key, holder string, now Time, ttl Duration, deadline Time, lim WaitLimits) (Lease, bool, error) {
	return t.WaitWith(key, holder, now, ttl, deadline, lim, Options{})
}

// WaitWith is WaitWithin with Options. A waiter under a session is granted
// under it, and leaves the queue when the session ends. A key in its
// lock-delay queues the holder (or, past its deadline, refuses with a
// *LockDelayError).
func (t *Table) WaitWith(key, holder string, now Time, ttl Duration, deadline Time, lim WaitLimits, o Options) (Lease, bool, error) {
	g, err := t.prepare(key, holder, now, ttl, o)
	if err != nil {
		return Lease{}, false, err
	}
	ttl = g.ttl
	refusal := t.grantable(key, holder, now)
	if errors.Is(refusal, ErrKindMismatch) { // never queued on a key of another kind
		return Lease{}, false, refusal
	}
	e := t.keys.get(key)
	full := t.sessionFull(g, key)
	if refusal == nil {
		if full {
			return Lease{}, false, &SessionLimitError{Scope: "session", Limit: MaxSessionLocks}
		}
		if e == nil {
			e = t.newEntry(key)
		}
		return t.grant(e, holder, now, ttl, now, g), true, nil
	}
	if now >= deadline {
		return Lease{}, false, refusal
	}
	q := (*waitQueue)(nil)
	if e != nil {
		q = t.queueOf(e)
	}
	if q != nil {
		for i := range q.waiters {
			if w := &q.waiters[i]; w.holder == holder {
				if w.sess != g.sess && g.sess != nil && full {
					return Lease{}, false, &SessionLimitError{Scope: "session", Limit: MaxSessionLocks}
				}
				t.setWaiterSession(key, w, g.sess)
				w.ttl, w.deadline, w.delay = ttl, deadline, g.delay
				return Lease{}, false, nil
			}
		}
	}
	n := 0
	if q != nil {
		n = len(q.waiters)
	}
	switch {
	case lim.PerKey > 0 && n >= lim.PerKey:
		return Lease{}, false, &QueueFullError{Key: key, Scope: "key", Limit: lim.PerKey}
	case lim.Total > 0 && t.queued >= lim.Total:
		return Lease{}, false, &QueueFullError{Key: key, Scope: "total", Limit: lim.Total}
	case lim.PerKeyOwner > 0 && q != nil && ownerWaiting(q.waiters, OwnerOf(holder)) >= lim.PerKeyOwner:
		return Lease{}, false, &QueueFullError{Key: key, Scope: "owner", Owner: OwnerOf(holder), Limit: lim.PerKeyOwner}
	case full:
		return Lease{}, false, &SessionLimitError{Scope: "session", Limit: MaxSessionLocks}
	}
	if e == nil {
		e = t.newEntry(key)
	}
	if q == nil {
		q = &waitQueue{}
		t.waiting[e.key] = q
		e.queued = true
	}
	w := waiter{holder: holder, ttl: ttl, since: now, deadline: deadline, delay: g.delay}
	t.setWaiterSession(key, &w, g.sess)
	q.waiters = append(q.waiters, w)
	t.queued++
	t.own(holder, 0, 1, 0)
	t.emit(Event{Kind: EventWaitJoined, Key: key, Holder: holder, At: now, Since: now, Expiry: deadline})
	return Lease{}, false, nil
}

// QueuedCount is the number of waiters in all queues.
func (t *Table) QueuedCount() int { return t.queued }

// CancelWait takes holder out of key's queue (EventWaitLeft, whose At is
// 0: the call is given no time). It reports whether holder was queued. It
// never touches a lease.
func (t *Table) CancelWait(key, holder string) bool {
	return t.CancelWaitAt(key, holder, t.maxNow)
}

// CancelWaitAt is CancelWait at now: when the waiter leaving lets others
// in (a writer at the head of a read/write lock's queue, with readers
// behind it), they are granted at now.
func (t *Table) CancelWaitAt(key, holder string, now Time) bool {
	e := t.keys.get(key)
	if e == nil {
		return false
	}
	if e.multi {
		t.see(now)
		return t.cancelShared(e, holder, now)
	}
	ws := t.waitersOf(e)
	for i := range ws {
		if ws[i].holder == holder {
			t.emit(Event{Kind: EventWaitLeft, Key: key, Holder: holder, Since: ws[i].since, Expiry: ws[i].deadline})
			t.setWaiterSession(key, &ws[i], nil)
			t.own(holder, 0, -1, 0)
			t.setWaiters(e, append(ws[:i], ws[i+1:]...))
			t.tidy(e)
			return true
		}
	}
	return false
}

// Release ends holder's lease on key if holder holds it and it is alive at
// now, handing the key to the head waiter. Anything else changes no lease
// and answers false: a lease that has expired may already belong to someone
// else, so it is never released by its old holder.
func (t *Table) Release(key, holder string, now Time) (bool, error) {
	if err := validate(key, holder); err != nil {
		return false, err
	}
	t.see(now)
	e := t.lookup(key, now)
	if e == nil {
		return false, nil
	}
	if e.multi {
		return t.releaseShared(e, holder, 0, now), nil
	}
	t.settle(e, now)
	if !e.held() || !e.alive(now) || e.holder.name != holder && !plant.On("release-ignores-holder") {
		t.tidy(e) // settle may have emptied it
		return false, nil
	}
	t.emit(Event{Kind: EventReleased, Key: key, Holder: holder, Token: e.token, At: now, Since: e.granted, Expiry: e.expiry})
	t.drop(e)
	t.handOff(e, now)
	t.tidy(e)
	return true, nil
}

// ReleaseToken is Release that also requires the lease to carry token.
func (t *Table) ReleaseToken(key, holder string, token uint64, now Time) (bool, error) {
	if err := validate(key, holder); err != nil {
		return false, err
	}
	e := t.keys.get(key)
	if e != nil && e.multi {
		t.see(now)
		return t.releaseShared(e, holder, token, now), nil
	}
	if e == nil || !e.held() || e.token != token {
		return false, nil
	}
	return t.Release(key, holder, now)
}

// Extend moves the expiry of the live grant (holder, token) on key to
// now+ttl, keeping its token: a keep-alive. Anything else returns ErrNotHeld
// and changes nothing.
func (t *Table) Extend(key, holder string, token uint64, now Time, ttl Duration) (Lease, error) {
	if err := validateGrant(key, holder, now, ttl); err != nil {
		return Lease{}, err
	}
	t.see(now)
	e := t.lookup(key, now)
	if e == nil {
		return Lease{}, ErrNotHeld
	}
	if e.multi {
		return t.extendShared(e, holder, token, now, ttl)
	}
	t.settle(e, now)
	if !e.held() || !e.alive(now) || e.holder.name != holder || e.token != token {
		t.tidy(e) // settle may have emptied it
		return Lease{}, ErrNotHeld
	}
	if e.holder.sess != nil {
		return Lease{}, ErrSessionLock
	}
	e.expiry = now + Time(ttl)
	e.ttl = ttl
	heap.Fix(&t.expiries, int(e.heapIdx))
	return e.lease(), nil
}

// IsValidToken reports whether key's current record carries exactly token.
// Like the seed's is_valid_token it takes no time; see Check.
func (t *Table) IsValidToken(key string, token uint64) bool {
	e := t.keys.get(key)
	if e != nil && e.multi {
		return t.sharedToken(e, token, 0, false)
	}
	return e != nil && e.held() && e.token == token
}

// Check reports whether token is key's current token and its lease is
// alive at now.
func (t *Table) Check(key string, token uint64, now Time) bool {
	e := t.keys.get(key)
	if e != nil && e.multi {
		return t.sharedToken(e, token, now, true)
	}
	return e != nil && e.held() && e.token == token && e.alive(now)
}

// Get returns key's lease if it is alive at now. It changes nothing. On a
// multi-holder key it answers the live holder with the oldest token (see
// Holders for all of them).
func (t *Table) Get(key string, now Time) (Lease, bool) {
	e := t.keys.get(key)
	if e != nil && e.multi {
		return t.sharedGet(e, now)
	}
	if e == nil || !e.held() || !e.alive(now) {
		return Lease{}, false
	}
	return e.lease(), true
}

// Waiters returns the holders queued on key, head first.
func (t *Table) Waiters(key string) []string {
	e := t.keys.get(key)
	if e == nil {
		return nil
	}
	if e.multi {
		return t.sharedWaiters(e)
	}
	ws := t.waitersOf(e)
	out := make([]string, len(ws))
	for i, w := range ws {
		out[i] = w.holder
	}
	return out
}

// List returns the leases alive at now whose key starts with prefix, sorted
// by key, at most limit of them (limit <= 0: all).
func (t *Table) List(prefix string, now Time, limit int) []Lease {
	return t.ListAfter(prefix, "", now, limit)
}

// ListAfter is List of the keys after after (the last key of the previous
// page; "" starts at the first). It walks the key index from the first key
// the page can hold, so a page costs O(log n + page + e), where e counts
// the keys in its range that hold no live lease yet are still kept:
// expired leases no Tick has ended yet (a leader ticks them away at their
// expiry).
func (t *Table) ListAfter(prefix, after string, now Time, limit int) []Lease {
	var out []Lease
	start := prefix
	if after >= prefix {
		start = after + "\x00" // the least key greater than after
	}
	t.index.AscendGreaterOrEqual(&entry{key: start}, func(e *entry) bool {
		if t.visit != nil {
			t.visit()
		}
		if !strings.HasPrefix(e.key, prefix) {
			return false
		}
		if e.multi {
			// A key's holders are never split across pages: the next
			// page starts after the key.
			out = t.holderLeases(out, e, now)
		} else if e.held() && e.alive(now) {
			out = append(out, e.lease())
		}
		return limit <= 0 || len(out) < limit
	})
	return out
}

// EachLive calls fn with the key of every lease alive at now, in key
// order, without copying the leases: counting them (metrics) costs no
// allocation.
func (t *Table) EachLive(now Time, fn func(key string)) {
	t.index.Ascend(func(e *entry) bool {
		if e.multi {
			for _, h := range t.multi[e.key].holders {
				if h.e.alive(now) {
					fn(e.key)
				}
			}
		} else if e.held() && e.alive(now) {
			fn(e.key)
		}
		return true
	})
}

// Tick brings the table up to now: every lease with expiry <= now expires
// (EventExpired) and its key passes to the head waiter; every waiter whose
// deadline has passed leaves its queue (EventWaitDropped).
func (t *Table) Tick(now Time) {
	t.see(now)
	if len(t.multi) > 0 {
		defer t.tickSharedWaiters(now)
	}
	for {
		// Leases and sessions end in the order of their expiries (a
		// lease before a session at the same instant).
		se, sok := t.nextSessionExpiry()
		if len(t.expiries) > 0 && t.expiries[0].expiry <= now && (!sok || t.expiries[0].expiry <= se) {
			e := t.expiries[0]
			if e.multi { // a semaphore's or read/write lock's holder
				t.tickShared(e, now)
				continue
			}
			t.expire(e, now)
			t.handOff(e, now)
			t.tidy(e)
			continue
		}
		if sok && se <= now {
			t.endSession(t.sessions.heap[0], now, EventExpired)
			continue
		}
		break
	}
	t.endDelays(now)
	if len(t.waiting) == 0 {
		return
	}
	var keys []string
	for k, q := range t.waiting {
		for _, w := range q.waiters {
			if w.late(now) {
				keys = append(keys, k)
				break
			}
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		e := t.keys.get(k)
		t.dropLateWaiters(e, t.waiting[k], now)
		t.tidy(e)
	}
}

// NextDeadline is the earliest instant at which Tick has work to do: a
// lease expiry or a waiter deadline. ok is false when there is none.
func (t *Table) NextDeadline() (at Time, ok bool) {
	at = maxTime
	if len(t.expiries) > 0 {
		at, ok = t.expiries[0].expiry, true
	}
	if se, sok := t.nextSessionExpiry(); sok && se < at {
		at, ok = se, true
	}
	for _, until := range t.delayed {
		if until < at {
			at, ok = until, true
		}
	}
	for _, q := range t.waiting {
		for _, w := range q.waiters {
			if w.deadline < at {
				at, ok = w.deadline, true
			}
		}
	}
	if len(t.multi) > 0 {
		return t.nextSharedDeadline(at, ok)
	}
	return at, ok
}

func (t *Table) see(now Time) {
	if now > t.maxNow {
		t.maxNow = now
	}
}

func (t *Table) newEntry(key string) *entry {
	// A copy of its own: the key a command decodes shares one allocation
	// with the holder's name (fsm), which a held lock would otherwise
	// keep as long as the key lives (24 B a lock of W4's million).
	key = strings.Clone(key)
	e := &entry{key: key, heapIdx: -1}
	t.keys.insert(e)
	t.index.ReplaceOrInsert(e)
	return e
}

// settle applies, at now, a hand-off that is already due: when e's lease
// has expired and someone is queued, the lease ends and the head waiter is
// granted. An expired lease with nobody waiting keeps its record, so that
// IsValidToken answers as the seed does until the key is taken again.
func (t *Table) settle(e *entry, now Time) {
	if !e.queued || (e.held() && e.alive(now)) {
		return
	}
	if e.held() {
		t.expire(e, now)
	}
	t.handOff(e, now)
}

// grant issues the next token to holder on e. since is when holder started
// asking (now, unless it waited).
func (t *Table) grant(e *entry, holder string, now Time, ttl Duration, since Time, g grantOpts) Lease {
	t.last++
	if e.held() {
		t.unref(e)
	}
	var r *holderRef
	if g.sess != nil {
		r = &g.sess.ref
		t.hold(r)
		g.sess.locks[e] = struct{}{}
		ttl = g.sess.ttl
	} else {
		r = t.internHolder(holder)
	}
	e.holder, e.token, e.granted, e.expiry, e.ttl = r, t.last, now, now+Time(ttl), ttl
	switch {
	case g.sess != nil && e.heapIdx >= 0:
		heap.Remove(&t.expiries, int(e.heapIdx))
	case g.sess != nil:
	case e.heapIdx >= 0:
		heap.Fix(&t.expiries, int(e.heapIdx))
	default:
		heap.Push(&t.expiries, e)
	}
	t.setDelay(e, g.delay)
	if t.delayed != nil {
		delete(t.delayed, e.key) // over: grant is never called in a delay
	}
	if q := t.queueOf(e); q != nil {
		for i := range q.waiters {
			if q.waiters[i].holder == holder {
				t.setWaiterSession(e.key, &q.waiters[i], nil)
				q.waiters = append(q.waiters[:i], q.waiters[i+1:]...)
				t.queued--
				t.own(holder, 0, -1, 0)
				break
			}
		}
		t.forgetIfEmpty(e, q)
	}
	t.emit(Event{Kind: EventGranted, Key: e.key, Holder: holder, Token: t.last, At: now, Since: since, Expiry: e.end()})
	return e.lease()
}

// handOff grants e, which holds no live lease, to its first waiter whose
// deadline has not passed.
func (t *Table) handOff(e *entry, now Time) {
	q := t.queueOf(e)
	if q == nil {
		return
	}
	t.dropLateWaiters(e, q, now)
	if len(q.waiters) == 0 || t.inDelay(e.key, now) {
		return
	}
	w := q.waiters[0]
	if plant.On("handoff-skips-head") {
		w = q.waiters[len(q.waiters)-1]
	}
	t.grant(e, w.holder, now, w.ttl, w.since, grantOpts{sess: w.sess, delay: w.delay})
}

// dropLateWaiters takes out of q, e's queue, every waiter whose deadline
// has passed.
func (t *Table) dropLateWaiters(e *entry, q *waitQueue, now Time) {
	ws := q.waiters
	kept := ws[:0]
	for i := range ws {
		w := &ws[i]
		if w.late(now) {
			t.emit(Event{Kind: EventWaitDropped, Key: e.key, Holder: w.holder, At: now, Since: w.since})
			t.setWaiterSession(e.key, w, nil)
			t.own(w.holder, 0, -1, 0)
			continue
		}
		kept = append(kept, *w)
	}
	clear(ws[len(kept):])
	t.queued -= len(ws) - len(kept)
	q.waiters = kept
	t.forgetIfEmpty(e, q)
}

func (t *Table) expire(e *entry, now Time) {
	end := e.end()
	t.emit(Event{Kind: EventExpired, Key: e.key, Holder: e.holder.name, Token: e.token, At: now, Since: e.granted, Expiry: end})
	t.startDelay(e, end, now)
	t.drop(e)
}

// drop removes e's lease record.
func (t *Table) drop(e *entry) {
	if e.heapIdx >= 0 {
		heap.Remove(&t.expiries, int(e.heapIdx))
	}
	t.unref(e)
	t.setDelay(e, 0)
	e.holder, e.token, e.granted, e.expiry, e.ttl = nil, 0, 0, 0, 0
}

// unref lets go of e's holder: its session, or its interned name.
func (t *Table) unref(e *entry) {
	if s := e.holder.sess; s != nil {
		delete(s.locks, e)
		t.unhold(&s.ref)
		return
	}
	t.releaseHolder(e.holder)
}

// tidy forgets e once it has neither a lease record nor a waiter.
func (t *Table) tidy(e *entry) {
	if !e.queued && !e.held() && !e.multi && t.keys.remove(e) {
		t.index.Delete(e)
	}
}

func (t *Table) emit(ev Event) {
	if t.observe != nil {
		t.observe(ev)
	}
}

// expiryHeap orders held entries by (expiry, key), so Tick expires them in
// a deterministic order.
type expiryHeap []*entry

func (h expiryHeap) Len() int { return len(h) }
func (h expiryHeap) Less(i, j int) bool {
	a, b := h[i], h[j]
	if a.expiry != b.expiry {
		return a.expiry < b.expiry
	}
	return a.key < b.key
}
func (h expiryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIdx = int32(i)
	h[j].heapIdx = int32(j)
}
func (h *expiryHeap) Push(x any) {
	e := x.(*entry)
	e.heapIdx = int32(len(*h))
	*h = append(*h, e)
}
func (h *expiryHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	e.heapIdx = -1
	return e
}

func heapInit(h *expiryHeap) { heap.Init(h) }

// internHolder returns the table's shared copy of name, counting one more
// lease that carries it.
func (t *Table) internHolder(name string) *holderRef {
	r := t.holders[name]
	switch {
	case r == nil:
		// Clone, so the table never pins a larger buffer name was cut from.
		r = &holderRef{name: strings.Clone(name)}
		t.holders[r.name] = r
	case r.n == 0:
		t.unused--
	}
	t.hold(r)
	return r
}

// releaseHolder counts one lease fewer carrying name. Names no lease
// carries are forgotten in sweeps, once they are at least half of the names
// kept, so a holder that takes and releases one lock over and over does not
// allocate its name each time, and forgotten names cost O(1) amortised.
func (t *Table) releaseHolder(r *holderRef) {
	if t.unhold(r); r.n > 0 {
		return
	}
	if t.unused++; t.unused > 64 && t.unused*2 > len(t.holders) {
		for k, r := range t.holders {
			if r.n == 0 {
				delete(t.holders, k)
			}
		}
		t.unused = 0
	}
}
