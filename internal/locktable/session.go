package locktable

import (
	"container/heap"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Sessions. A session is a lease of its own: a holder, a TTL and an
// expiry, under an id the table assigns from its own counter (1, 2, ...,
// never reused), so every replica that applies the same calls assigns the
// same ids. Locks granted under a session carry no expiry of their own:
// they are alive while the session is, so one ExtendSession renews all of
// them in O(log sessions), whatever their number. When the session ends
// (CloseSession, or an expiry Tick or any call notices), every lock under
// it is released in key order and every key is handed to its head waiter
// in the same call; its own queue places are dropped first, so it is never
// handed a key as it goes. Each lock still has its own fencing token.
//
// Layout: the entry of a session lock points (holder) at the session's own
// holderRef, whose sess field names the session; the entry stays in the
// 64-byte size class and is not in the expiry heap. The session keeps the
// set of its entries and of the keys it waits on.

// Limits on sessions. They bound what one holder or the table can pin.
const (
	MaxSessions          = 1 << 20 // open sessions in a table: Chubby-scale cells (about 90,000 clients a master) fit ten times over
	MaxSessionsPerHolder = 1024    // open sessions of one holder
	MaxSessionLocks      = 1 << 16 // locks held plus queue places of one session
)

// Session is a session as reported by the table.
type Session struct {
	ID      uint64
	Holder  string
	TTL     Duration
	Created Time
	Expiry  Time // alive while now < Expiry
	Locks   int  // locks held under it
	Waiting int  // queue places under it
}

type session struct {
	id      uint64
	ref     holderRef // the holder of its locks; ref.sess points back here
	ttl     Duration
	created Time
	expiry  Time
	heapIdx int
	locks   map[*entry]struct{}
	waits   map[string]struct{} // keys where it has a queue place
}

func (s *session) info() Session {
	return Session{ID: s.id, Holder: s.ref.name, TTL: s.ttl, Created: s.created, Expiry: s.expiry,
		Locks: len(s.locks), Waiting: len(s.waits)}
}

func (s *session) alive(now Time) bool { return now < s.expiry }

// sessionTable is the table's session state, allocated by the first
// OpenSession so a table without sessions pays one nil pointer.
type sessionTable struct {
	last     uint64 // the last id assigned
	byID     map[uint64]*session
	byHolder map[string]int
	heap     sessionHeap
}

func (t *Table) sess() *sessionTable {
	if t.sessions == nil {
		t.sessions = &sessionTable{byID: map[uint64]*session{}, byHolder: map[string]int{}}
	}
	return t.sessions
}

// Options are what a grant may ask for beyond a key, holder and ttl.
type Options struct {
	// Session, when not 0, grants under that session (which must be alive
	// and belong to the holder); ttl is then ignored.
	Session uint64
	// LockDelay, when > 0, keeps the key granted to nobody for that long
	// after the lease expires (not after a release). At most MaxLockDelay.
	LockDelay Duration
}

// OpenSession opens a session for holder with ttl, alive until now+ttl.
func (t *Table) OpenSession(holder string, now Time, ttl Duration) (Session, error) {
	if err := validateHolder(holder); err != nil {
		return Session{}, err
	}
	if err := validateTTL(now, ttl); err != nil {
		return Session{}, err
	}
	t.see(now)
	st := t.sess()
	switch {
	case len(st.byID) >= MaxSessions:
		return Session{}, &SessionLimitError{Scope: "table", Limit: MaxSessions}
	case st.byHolder[holder] >= MaxSessionsPerHolder:
		return Session{}, &SessionLimitError{Scope: "holder", Limit: MaxSessionsPerHolder}
	}
	st.last++
	s := &session{id: st.last, ref: holderRef{name: strings.Clone(holder)}, ttl: ttl, created: now,
		expiry: now + Time(ttl), locks: map[*entry]struct{}{}, waits: map[string]struct{}{}}
	t.addSession(s)
	return s.info(), nil
}

func (t *Table) addSession(s *session) {
	st := t.sess()
	s.ref.sess = s
	st.byID[s.id] = s
	st.byHolder[s.ref.name]++
	t.own(s.ref.name, 0, 0, 1)
	heap.Push(&st.heap, s)
}

// liveSession is holder's session id alive at now, or ErrNoSession. A
// session that has expired but not yet ended is ended here.
func (t *Table) liveSession(id uint64, holder string, now Time) (*session, error) {
	if t.sessions == nil {
		return nil, ErrNoSession
	}
	s := t.sessions.byID[id]
	if s == nil || s.ref.name != holder {
		return nil, ErrNoSession
	}
	if !s.alive(now) {
		t.endSession(s, now, EventExpired)
		return nil, ErrNoSession
	}
	return s, nil
}

// holdersSession is what a call of holder on its session id starts with:
// the holder checked, the table's clock moved to now, the session alive.
func (t *Table) holdersSession(id uint64, holder string, now Time) (*session, error) {
	if err := validateHolder(holder); err != nil {
		return nil, err
	}
	t.see(now)
	return t.liveSession(id, holder, now)
}

// ExtendSession moves the expiry of holder's live session id to now+its
// TTL: one keep-alive for every lock under it.
func (t *Table) ExtendSession(id uint64, holder string, now Time) (Session, error) {
	s, err := t.holdersSession(id, holder, now)
	if err != nil {
		return Session{}, err
	}
	if err := validateTTL(now, s.ttl); err != nil {
		return Session{}, err
	}
	s.expiry = now + Time(s.ttl)
	heap.Fix(&t.sessions.heap, s.heapIdx)
	return s.info(), nil
}

// CloseSession ends holder's live session id: its locks are released
// (EventReleased) and handed on, its queue places dropped. It answers the
// session as it was just before it ended.
func (t *Table) CloseSession(id uint64, holder string, now Time) (Session, error) {
	s, err := t.holdersSession(id, holder, now)
	if err != nil {
		return Session{}, err
	}
	info := s.info()
	t.endSession(s, now, EventReleased)
	return info, nil
}

// GetSession returns session id if it is alive at now. It changes nothing.
func (t *Table) GetSession(id uint64, now Time) (Session, bool) {
	if t.sessions == nil {
		return Session{}, false
	}
	s := t.sessions.byID[id]
	if s == nil || !s.alive(now) {
		return Session{}, false
	}
	return s.info(), true
}

// SessionKeys returns the keys of the locks held under session id, sorted.
func (t *Table) SessionKeys(id uint64) []string {
	if t.sessions == nil || t.sessions.byID[id] == nil {
		return nil
	}
	return sortedKeys(t.sessions.byID[id])
}

// SessionCount is the number of sessions not yet ended.
func (t *Table) SessionCount() int {
	if t.sessions == nil {
		return 0
	}
	return len(t.sessions.byID)
}

func sortedKeys(s *session) []string {
	keys := make([]string, 0, len(s.locks))
	for e := range s.locks {
		keys = append(keys, e.key)
	}
	slices.Sort(keys)
	return keys
}

// endSession ends s at now. Its queue places go first (EventWaitDropped),
// then every lock under it ends with kind (EventReleased on close,
// EventExpired on expiry; an expiry starts the lock's lock-delay), then
// each key is handed to its head waiter, all in key order.
func (t *Table) endSession(s *session, now Time, kind EventKind) {
	st := t.sessions
	heap.Remove(&st.heap, s.heapIdx)
	delete(st.byID, s.id)
	if st.byHolder[s.ref.name]--; st.byHolder[s.ref.name] <= 0 {
		delete(st.byHolder, s.ref.name)
	}
	t.own(s.ref.name, 0, 0, -1)
	for _, k := range slices.Sorted(maps.Keys(s.waits)) {
		e := t.keys.get(k)
		if e == nil {
			continue
		}
		q := t.queueOf(e)
		if q == nil {
			continue
		}
		for i, w := range q.waiters {
			if w.sess == s {
				t.emit(Event{Kind: EventWaitDropped, Key: k, Holder: w.holder, At: now, Since: w.since})
				q.waiters = append(q.waiters[:i], q.waiters[i+1:]...)
				t.queued--
				t.own(w.holder, 0, -1, 0)
				break
			}
		}
		t.forgetIfEmpty(e, q)
		t.tidy(e)
	}
	clear(s.waits)
	keys := sortedKeys(s)
	ended := make([]*entry, len(keys))
	for i, k := range keys {
		e := t.keys.get(k)
		ended[i] = e
		if kind == EventExpired {
			t.expire(e, now)
		} else {
			t.emit(Event{Kind: EventReleased, Key: e.key, Holder: s.ref.name, Token: e.token, At: now, Since: e.granted, Expiry: s.expiry})
			t.drop(e)
		}
	}
	for _, e := range ended {
		t.handOff(e, now)
		t.tidy(e)
	}
}

// nextSessionExpiry is the earliest expiry of a session not yet ended.
func (t *Table) nextSessionExpiry() (Time, bool) {
	if t.sessions == nil || len(t.sessions.heap) == 0 {
		return 0, false
	}
	return t.sessions.heap[0].expiry, true
}

// lookup is key's entry after ending a session that holds it and has
// expired at now, so that every lock of a dead session goes at once, with
// its keys handed on, whichever of them a call touches first. Likewise an
// expired lease that has a lock-delay ends here, so the delay applies.
func (t *Table) lookup(key string, now Time) *entry {
	return t.endDue(t.keys.get(key), key, now)
}

// endDue is lookup for e, key's entry (nil: none), already found.
func (t *Table) endDue(e *entry, key string, now Time) *entry {
	if e == nil || !e.held() {
		return e
	}
	if s := e.holder.sess; s != nil && !s.alive(now) {
		t.endSession(s, now, EventExpired)
		return t.keys.get(key)
	}
	if !e.alive(now) && t.delays[e] > 0 {
		t.expire(e, now)
		t.handOff(e, now)
		t.tidy(e)
		return t.keys.get(key)
	}
	return e
}

// sessionFull reports whether granting key under g's session, or queueing
// it there, would take the session over MaxSessionLocks.
func (t *Table) sessionFull(g grantOpts, key string) bool {
	s := g.sess
	if s == nil || len(s.locks)+len(s.waits) < MaxSessionLocks {
		return false
	}
	if e := t.keys.get(key); e != nil && e.held() && e.holder.sess == s {
		return false
	}
	_, waiting := s.waits[key]
	return !waiting
}

// sessionHeap orders sessions by (expiry, id).
type sessionHeap []*session

func (h sessionHeap) Len() int { return len(h) }
func (h sessionHeap) Less(i, j int) bool {
	if h[i].expiry != h[j].expiry {
		return h[i].expiry < h[j].expiry
	}
	return h[i].id < h[j].id
}
func (h sessionHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIdx, h[j].heapIdx = i, j
}
func (h *sessionHeap) Push(x any) {
	s := x.(*session)
	s.heapIdx = len(*h)
	*h = append(*h, s)
}
func (h *sessionHeap) Pop() any {
	old := *h
	s := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	s.heapIdx = -1
	return s
}

// SessionLimitError refuses a session over a limit. It matches
// ErrTooManySessions.
type SessionLimitError struct {
	Scope string // "table", "holder" or "session" (locks of one session)
	Limit int
}

func (e *SessionLimitError) Error() string {
	switch e.Scope {
	case "session":
		return fmt.Sprintf("locktable: the session holds %d locks and queue places, the limit", e.Limit)
	case "holder":
		return fmt.Sprintf("locktable: the holder has %d open sessions, the limit", e.Limit)
	}
	return fmt.Sprintf("locktable: %d open sessions, the limit", e.Limit)
}

func (e *SessionLimitError) Unwrap() error { return ErrTooManySessions }

// SessionStats is the number of sessions not yet ended and of the locks
// held under them.
func (t *Table) SessionStats() (sessions, locks int) {
	if t.sessions == nil {
		return 0, 0
	}
	for _, s := range t.sessions.byID {
		locks += len(s.locks)
	}
	return len(t.sessions.byID), locks
}
