package locktable

import (
	"container/heap"
	"errors"
	"fmt"
	"sort"
)

// Multi-holder keys: semaphores and read/write locks (docs/PRIMITIVES.md).
//
// A key is of one Kind while it exists, that is while it has a live holder
// or a waiter. Exclusive keys are the table's plain entries and pay
// nothing for the others: a multi-holder key has, in the table's maps and
// key index, a placeholder entry (multi set, no lease of its own) whose
// state lives in Table.multi; each of its holders is an entry of its own
// (multi set, not in Table.entries) in the one expiry heap, so Tick ends
// every kind of lease in one order. Every grant, of any kind, takes the
// next token of the one counter.

// Kind is what a key is while it exists.
type Kind uint8

const (
	// Exclusive: one holder (Acquire, Wait).
	Exclusive Kind = iota
	// Semaphore: up to Permits holders.
	Semaphore
	// ReadWrite: many readers or one writer.
	ReadWrite
)

func (k Kind) String() string {
	switch k {
	case Exclusive:
		return "exclusive"
	case Semaphore:
		return "semaphore"
	case ReadWrite:
		return "rwlock"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// MaxPermits bounds a semaphore's limit: a holder list is scanned on every
// call on its key.
const MaxPermits = 1000

// Shared says which multi-holder kind a request asks for.
type Shared struct {
	Kind    Kind // Semaphore or ReadWrite
	Permits int  // Semaphore: 1..MaxPermits; ReadWrite: 0
	Write   bool // ReadWrite: a writer (else a reader)
}

// ErrKindMismatch: the key exists as another kind, or as a semaphore of
// another limit.
var ErrKindMismatch = errors.New("locktable: key is of another kind")

// KindMismatchError is the refusal of a request whose kind (or semaphore
// limit) differs from the key's while the key exists. It matches
// ErrKindMismatch with errors.Is. Nothing was changed.
type KindMismatchError struct {
	Key     string
	Kind    Kind // the key's kind
	Permits int  // the key's limit, when a semaphore
	Asked   Shared
}

func (e *KindMismatchError) Error() string {
	return fmt.Sprintf("locktable: %q is %s while it has holders or waiters; asked for %s", e.Key, kindPhrase(e.Kind, e.Permits), kindPhrase(e.Asked.Kind, e.Asked.Permits))
}

func kindPhrase(k Kind, permits int) string {
	switch k {
	case Exclusive:
		return "an exclusive lock"
	case Semaphore:
		return fmt.Sprintf("a semaphore of %d permits", permits)
	case ReadWrite:
		return "a read/write lock"
	}
	return k.String()
}

func (e *KindMismatchError) Unwrap() error { return ErrKindMismatch }

// multiKey is the state of one semaphore or read/write key.
type multiKey struct {
	kind    Kind
	permits int
	holders []sharedHolder // token order (a renewal moves to the back)
	waiters []sharedWaiter // FIFO
}

type sharedHolder struct {
	e     *entry // key, holder, token, granted, expiry, ttl; in Table.expiries
	write bool
	slot  int // a semaphore's permit, 1..permits; 0 for a read/write lock
}

type sharedWaiter struct {
	waiter
	write bool
}

func (m *multiKey) sameKind(s Shared) bool {
	return m.kind == s.Kind && (m.kind != Semaphore || m.permits == s.Permits)
}

// fits reports whether one more holder of that mode may join the holders.
func (m *multiKey) fits(write bool) bool {
	if m.kind == Semaphore {
		return len(m.holders) < m.permits
	}
	if write {
		return len(m.holders) == 0
	}
	for _, h := range m.holders {
		if h.write {
			return false
		}
	}
	return true
}

func (m *multiKey) holderIndex(holder string) int {
	for i, h := range m.holders {
		if h.e.holder.name == holder {
			return i
		}
	}
	return -1
}

func (m *multiKey) waiterIndex(holder string) int {
	for i, w := range m.waiters {
		if w.holder == holder {
			return i
		}
	}
	return -1
}

// ownerWaiting counts the waiters of owner (OwnerOf) in m's queue.
func (m *multiKey) ownerWaiting(owner string) int {
	n := 0
	for i := range m.waiters {
		if OwnerOf(m.waiters[i].holder) == owner {
			n++
		}
	}
	return n
}

func (m *multiKey) lease(h sharedHolder) Lease {
	l := h.e.lease()
	l.Kind, l.Write, l.Slot = m.kind, h.write, h.slot
	if m.kind == Semaphore {
		l.Permits = m.permits
	}
	return l
}

// inTheWay is the lease a refused request is told about: the writer, else
// the holder whose lease ends first.
func (m *multiKey) inTheWay() Lease {
	best := -1
	for i, h := range m.holders {
		if h.write {
			return m.lease(h)
		}
		if best < 0 || h.e.expiry < m.holders[best].e.expiry {
			best = i
		}
	}
	if best < 0 {
		return Lease{}
	}
	return m.lease(m.holders[best])
}

func validateShared(s Shared) error {
	switch s.Kind {
	case Semaphore:
		if s.Permits < 1 || s.Permits > MaxPermits {
			return &InputError{Field: "permits", Reason: fmt.Sprintf("%d must be between 1 and %d", s.Permits, MaxPermits), kind: ErrInvalidPermits}
		}
		if s.Write {
			return &InputError{Field: "mode", Reason: "a semaphore has no read or write mode", kind: ErrInvalidPermits}
		}
	case ReadWrite:
		if s.Permits != 0 {
			return &InputError{Field: "permits", Reason: "a read/write lock has no permits", kind: ErrInvalidPermits}
		}
	default:
		return &InputError{Field: "kind", Reason: fmt.Sprintf("%s is not a multi-holder kind", s.Kind), kind: ErrInvalidPermits}
	}
	return nil
}

// ErrInvalidPermits: a semaphore limit out of range, or a malformed
// multi-holder request.
var ErrInvalidPermits = errors.New("locktable: invalid permits")

// AcquireShared is Acquire and WaitWithin for semaphores and read/write
// locks. It grants when the request fits beside the key's live holders and
// nobody is queued (FIFO: a reader arriving behind a queued writer waits),
// or when holder already holds the key: then it is a renewal with a new
// token (a reader that is the only holder may become the writer; a writer
// may become a reader). Otherwise, when deadline > now, holder joins the
// back of the queue (or keeps its place) and AcquireShared answers
// (Lease{}, false, nil); the grant comes later as an EventGranted. A
// deadline <= now refuses with a *HeldError. A key of another kind, or a
// semaphore of another limit, refuses with a *KindMismatchError. Refusals
// change nothing.
func (t *Table) AcquireShared(key, holder string, s Shared, now Time, ttl Duration, deadline Time, lim WaitLimits) (Lease, bool, error) {
	if err := validateGrant(key, holder, now, ttl); err != nil {
		return Lease{}, false, err
	}
	if err := validateShared(s); err != nil {
		return Lease{}, false, err
	}
	t.see(now)
	if e := t.keys.get(key); e != nil && !e.multi {
		t.settleKey(key, now) // a dead session's locks, a due hand-off, a lock-delay's start
	}
	if t.inDelay(key, now) { // an exclusive lease's lock-delay: granted to nobody
		return Lease{}, false, &LockDelayError{Key: key, Until: t.delayed[key]}
	}
	e := t.keys.get(key)
	if e != nil && !e.multi {
		if (e.held() && e.alive(now)) || e.queued {
			return Lease{}, false, &KindMismatchError{Key: key, Kind: Exclusive, Asked: s}
		}
		if e.held() { // an expired record nobody waits for: it ends here
			t.expire(e, now)
		}
		t.tidy(e)
		e = nil
	}
	var m *multiKey
	if e != nil {
		m = t.multi[key]
		t.settleShared(e, m, now)
		if t.keys.get(key) == nil { // settling emptied it
			e = nil
		}
	}
	if e != nil && !m.sameKind(s) {
		return Lease{}, false, &KindMismatchError{Key: key, Kind: m.kind, Permits: m.permits, Asked: s}
	}
	if e == nil {
		e = t.newEntry(key)
		e.multi = true
		m = &multiKey{kind: s.Kind, permits: s.Permits}
		if t.multi == nil {
			t.multi = map[string]*multiKey{}
		}
		t.multi[key] = m
	}
	if i := m.holderIndex(holder); i >= 0 {
		h := m.holders[i]
		if m.kind == ReadWrite && s.Write && !h.write && len(m.holders) > 1 {
			// An upgrade beside other readers would wait for them while
			// holding them off the writers behind it: refused, never queued.
			return Lease{}, false, &HeldError{Lease: m.lease(m.holders[(i+1)%len(m.holders)])}
		}
		m.removeHolder(i)
		t.removeHolderEntry(h.e)
		l := t.grantSlot(e, m, holder, s.Write, now, ttl, now, h.slot)
		t.handOffShared(e, m, now) // a writer that became a reader lets readers in
		return l, true, nil
	}
	if len(m.waiters) == 0 && m.fits(s.Write) {
		return t.grantShared(e, m, holder, s.Write, now, ttl, now), true, nil
	}
	if now >= deadline {
		err := &HeldError{Lease: m.inTheWay()}
		t.tidyShared(e, m)
		return Lease{}, false, err
	}
	if i := m.waiterIndex(holder); i >= 0 {
		m.waiters[i].ttl, m.waiters[i].deadline, m.waiters[i].write = ttl, deadline, s.Write
		// A writer at the head that asks again as a reader may fit now.
		t.handOffShared(e, m, now)
		if j := m.holderIndex(holder); j >= 0 {
			return m.lease(m.holders[j]), true, nil
		}
		return Lease{}, false, nil
	}
	switch n := len(m.waiters); {
	case lim.PerKey > 0 && n >= lim.PerKey:
		t.tidyShared(e, m)
		return Lease{}, false, &QueueFullError{Key: key, Scope: "key", Limit: lim.PerKey}
	case lim.Total > 0 && t.queued >= lim.Total:
		t.tidyShared(e, m)
		return Lease{}, false, &QueueFullError{Key: key, Scope: "total", Limit: lim.Total}
	case lim.PerKeyOwner > 0 && m.ownerWaiting(OwnerOf(holder)) >= lim.PerKeyOwner:
		t.tidyShared(e, m)
		return Lease{}, false, &QueueFullError{Key: key, Scope: "owner", Owner: OwnerOf(holder), Limit: lim.PerKeyOwner}
	}
	m.waiters = append(m.waiters, sharedWaiter{waiter: waiter{holder: holder, ttl: ttl, since: now, deadline: deadline}, write: s.Write})
	t.queued++
	t.own(holder, 0, 1, 0)
	t.emit(Event{Kind: EventWaitJoined, Key: key, Holder: holder, At: now, Since: now, Expiry: deadline})
	return Lease{}, false, nil
}

// grantShared issues the next token to holder on e, m's placeholder.
func (t *Table) grantShared(e *entry, m *multiKey, holder string, write bool, now Time, ttl Duration, since Time) Lease {
	return t.grantSlot(e, m, holder, write, now, ttl, since, m.freeSlot())
}

// freeSlot is the lowest permit no holder has (0 for a read/write lock).
func (m *multiKey) freeSlot() int {
	if m.kind != Semaphore {
		return 0
	}
	used := make([]bool, len(m.holders)+2)
	for _, h := range m.holders {
		if h.slot < len(used) {
			used[h.slot] = true
		}
	}
	for s := 1; ; s++ {
		if !used[s] {
			return s
		}
	}
}

func (t *Table) grantSlot(e *entry, m *multiKey, holder string, write bool, now Time, ttl Duration, since Time, slot int) Lease {
	t.last++
	he := &entry{key: e.key, holder: t.internHolder(holder), token: t.last, granted: now, expiry: now + Time(ttl), ttl: ttl, multi: true}
	heap.Push(&t.expiries, he)
	h := sharedHolder{e: he, write: write, slot: slot}
	m.holders = append(m.holders, h)
	if i := m.waiterIndex(holder); i >= 0 {
		m.waiters = append(m.waiters[:i], m.waiters[i+1:]...)
		t.queued--
		t.own(holder, 0, -1, 0)
	}
	t.emit(Event{Kind: EventGranted, Key: e.key, Holder: holder, Token: t.last, At: now, Since: since, Expiry: he.expiry})
	return m.lease(h)
}

func (m *multiKey) removeHolder(i int) {
	m.holders = append(m.holders[:i], m.holders[i+1:]...)
}

// removeHolderEntry takes a holder's entry out of the expiry heap.
func (t *Table) removeHolderEntry(he *entry) {
	heap.Remove(&t.expiries, int(he.heapIdx))
	t.releaseHolder(he.holder)
}

// settleShared ends, at now, every lease of m that has expired, then hands
// the freed room to the queue.
func (t *Table) settleShared(e *entry, m *multiKey, now Time) {
	expired := false
	for i := 0; i < len(m.holders); {
		h := m.holders[i]
		if now < h.e.expiry {
			i++
			continue
		}
		t.emit(Event{Kind: EventExpired, Key: e.key, Holder: h.e.holder.name, Token: h.e.token, At: now, Since: h.e.granted, Expiry: h.e.expiry})
		m.removeHolder(i)
		t.removeHolderEntry(h.e)
		expired = true
	}
	if expired || len(m.waiters) > 0 {
		t.handOffShared(e, m, now)
	}
	t.tidyShared(e, m)
}

// handOffShared drops late waiters, then grants the head of the queue for
// as long as it fits: one writer, or every reader up to the next writer,
// or as many semaphore waiters as there are free permits.
func (t *Table) handOffShared(e *entry, m *multiKey, now Time) {
	t.dropLateShared(e, m, now)
	for len(m.waiters) > 0 && m.fits(m.waiters[0].write) {
		w := m.waiters[0]
		t.grantShared(e, m, w.holder, w.write, now, w.ttl, w.since)
	}
}

func (t *Table) dropLateShared(e *entry, m *multiKey, now Time) {
	kept := m.waiters[:0]
	for _, w := range m.waiters {
		if now >= w.deadline {
			t.emit(Event{Kind: EventWaitDropped, Key: e.key, Holder: w.holder, At: now, Since: w.since})
			t.own(w.holder, 0, -1, 0)
			continue
		}
		kept = append(kept, w)
	}
	t.queued -= len(m.waiters) - len(kept)
	clear(m.waiters[len(kept):])
	m.waiters = kept
}

// tidyShared forgets the key once it has neither holder nor waiter: then
// it may be taken again as any kind.
func (t *Table) tidyShared(e *entry, m *multiKey) {
	if len(m.holders) == 0 && len(m.waiters) == 0 {
		delete(t.multi, e.key)
		t.keys.remove(e)
		t.index.Delete(e)
	}
}

// releaseShared ends holder's live lease on e (only grant token, unless 0).
func (t *Table) releaseShared(e *entry, holder string, token uint64, now Time) bool {
	m := t.multi[e.key]
	t.settleShared(e, m, now)
	i := m.holderIndex(holder)
	if i < 0 || (token != 0 && m.holders[i].e.token != token) {
		return false
	}
	h := m.holders[i]
	t.emit(Event{Kind: EventReleased, Key: e.key, Holder: holder, Token: h.e.token, At: now, Since: h.e.granted, Expiry: h.e.expiry})
	m.removeHolder(i)
	t.removeHolderEntry(h.e)
	t.handOffShared(e, m, now)
	t.tidyShared(e, m)
	return true
}

func (t *Table) extendShared(e *entry, holder string, token uint64, now Time, ttl Duration) (Lease, error) {
	m := t.multi[e.key]
	t.settleShared(e, m, now)
	i := m.holderIndex(holder)
	if i < 0 || m.holders[i].e.token != token {
		return Lease{}, ErrNotHeld
	}
	h := m.holders[i]
	h.e.expiry, h.e.ttl = now+Time(ttl), ttl
	heap.Fix(&t.expiries, int(h.e.heapIdx))
	return m.lease(h), nil
}

func (t *Table) cancelShared(e *entry, holder string, now Time) bool {
	m := t.multi[e.key]
	t.settleShared(e, m, now)
	i := m.waiterIndex(holder)
	if i < 0 {
		return false
	}
	w := m.waiters[i]
	t.emit(Event{Kind: EventWaitLeft, Key: e.key, Holder: holder, At: now, Since: w.since, Expiry: w.deadline})
	m.waiters = append(m.waiters[:i], m.waiters[i+1:]...)
	t.queued--
	t.own(holder, 0, -1, 0)
	// A writer that leaves the head lets the readers behind it in.
	t.handOffShared(e, m, now)
	t.tidyShared(e, m)
	return true
}

// holderLeases appends m's holders' leases alive at now.
func (t *Table) holderLeases(out []Lease, e *entry, now Time) []Lease {
	m := t.multi[e.key]
	for _, h := range m.holders {
		if h.e.alive(now) {
			out = append(out, m.lease(h))
		}
	}
	return out
}

// Holders returns every lease alive at now on key, in token order: one for
// an exclusive key, up to the limit for a semaphore, the readers or the
// writer of a read/write lock. It changes nothing.
func (t *Table) Holders(key string, now Time) []Lease {
	e := t.keys.get(key)
	if e == nil {
		return nil
	}
	if !e.multi {
		if e.held() && e.alive(now) {
			return []Lease{e.lease()}
		}
		return nil
	}
	return t.holderLeases(nil, e, now)
}

// LeaseOf returns holder's lease on key if it is alive at now, whatever the
// key's kind.
func (t *Table) LeaseOf(key, holder string, now Time) (Lease, bool) {
	e := t.keys.get(key)
	if e == nil {
		return Lease{}, false
	}
	if !e.multi {
		if e.held() && e.alive(now) && e.holder.name == holder {
			return e.lease(), true
		}
		return Lease{}, false
	}
	m := t.multi[key]
	if i := m.holderIndex(holder); i >= 0 && m.holders[i].e.alive(now) {
		return m.lease(m.holders[i]), true
	}
	return Lease{}, false
}

// KindOf is key's kind and, for a semaphore, its limit, while the key
// exists; ok is false for a key the table does not keep.
func (t *Table) KindOf(key string) (kind Kind, permits int, ok bool) {
	e := t.keys.get(key)
	if e == nil {
		return Exclusive, 0, false
	}
	if !e.multi {
		return Exclusive, 0, true
	}
	m := t.multi[key]
	return m.kind, m.permits, true
}

func (t *Table) sharedToken(e *entry, token uint64, now Time, timed bool) bool {
	for _, h := range t.multi[e.key].holders {
		if h.e.token == token {
			return !timed || h.e.alive(now)
		}
	}
	return false
}

func (t *Table) sharedGet(e *entry, now Time) (Lease, bool) {
	m := t.multi[e.key]
	for _, h := range m.holders {
		if h.e.alive(now) {
			return m.lease(h), true
		}
	}
	return Lease{}, false
}

func (t *Table) sharedWaiters(e *entry) []string {
	m := t.multi[e.key]
	out := make([]string, len(m.waiters))
	for i, w := range m.waiters {
		out[i] = w.holder
	}
	return out
}

// tickShared expires the due holders of the key of he, one of its holders
// at the top of the heap.
func (t *Table) tickShared(he *entry, now Time) {
	e := t.keys.get(he.key)
	t.settleShared(e, t.multi[he.key], now)
}

// tickSharedWaiters drops every multi-holder waiter whose deadline has
// passed, in key order, and hands off what that frees.
func (t *Table) tickSharedWaiters(now Time) {
	var keys []string
	for k, m := range t.multi {
		for _, w := range m.waiters {
			if now >= w.deadline {
				keys = append(keys, k)
				break
			}
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		e, m := t.keys.get(k), t.multi[k]
		t.handOffShared(e, m, now)
		t.tidyShared(e, m)
	}
}

func (t *Table) nextSharedDeadline(at Time, ok bool) (Time, bool) {
	for _, m := range t.multi {
		for _, w := range m.waiters {
			if w.deadline < at {
				at, ok = w.deadline, true
			}
		}
	}
	return at, ok
}

func (t *Table) queuedShared(out []Queued) []Queued {
	for k, m := range t.multi {
		out = m.queued(out, k, len(m.waiters))
	}
	return out
}

// queued appends m's first n waiters, head first.
func (m *multiKey) queued(out []Queued, key string, n int) []Queued {
	for _, w := range m.waiters[:n] {
		out = append(out, Queued{Key: key, Holder: w.holder, Since: w.since, Deadline: w.deadline, Write: w.write})
	}
	return out
}
