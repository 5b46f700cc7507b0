package locktable

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/fencelock/fencelock/internal/binread"
)

// Section 1, sessions (written once a table has opened a session, so the
// id counter survives a restore even when no session is open):
//
//	uvarint last id | uvarint count | each, by id:
//	  uvarint id | string holder | varint ttl | varint created | varint expiry |
//	  uvarint locks | each key, sorted: string |
//	  uvarint queue places | each key, sorted: string
//
// A lock's lease record (token, granted) is in the entries as usual, with
// the session's expiry and ttl; the section re-attaches it to its session.
//
// Section 2, lock-delays (written when any is set):
//
//	uvarint n | each lease that takes one, by key: string key | varint delay |
//	uvarint n | each waiter that asks for one, by key: string key | string holder | varint delay |
//	uvarint n | each key in its delay, by key: string key | varint until

func encodeSessions(t *Table, b []byte) []byte {
	st := t.sessions
	if st == nil || st.last == 0 {
		return b
	}
	ids := make([]uint64, 0, len(st.byID))
	for id := range st.byID {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	b = binary.AppendUvarint(b, st.last)
	b = binary.AppendUvarint(b, uint64(len(ids)))
	for _, id := range ids {
		s := st.byID[id]
		b = binary.AppendUvarint(b, s.id)
		b = appendString(b, s.ref.name)
		b = binary.AppendVarint(b, int64(s.ttl))
		b = binary.AppendVarint(b, int64(s.created))
		b = binary.AppendVarint(b, int64(s.expiry))
		keys := sortedKeys(s)
		b = binary.AppendUvarint(b, uint64(len(keys)))
		for _, k := range keys {
			b = appendString(b, k)
		}
		waits := make([]string, 0, len(s.waits))
		for k := range s.waits {
			waits = append(waits, k)
		}
		slices.Sort(waits)
		b = binary.AppendUvarint(b, uint64(len(waits)))
		for _, k := range waits {
			b = appendString(b, k)
		}
	}
	return b
}

func decodeSessions(t *Table, p []byte) error {
	d := &decoder{binread.New(p)}
	st := t.sess()
	st.last = d.Uvarint()
	n := d.Uvarint()
	if d.Err() == nil && (st.last == 0 || n > uint64(d.Len())/5 || n > MaxSessions) {
		return fmt.Errorf("last id %d, %d sessions", st.last, n)
	}
	var prev uint64
	for i := uint64(0); i < n && d.Err() == nil; i++ {
		id := d.Uvarint()
		holder := d.String(MaxHolderLen)
		s := &session{id: id, ref: holderRef{name: holder}, ttl: Duration(d.Varint()), created: Time(d.Varint()),
			expiry: Time(d.Varint()), locks: map[*entry]struct{}{}, waits: map[string]struct{}{}}
		if d.Err() != nil {
			break
		}
		if id <= prev || id > st.last || validateHolder(holder) != nil || s.ttl <= 0 ||
			st.byHolder[holder] >= MaxSessionsPerHolder {
			return fmt.Errorf("session %d: bad id, holder or ttl", i)
		}
		prev = id
		t.addSession(s)
		nl := d.Uvarint()
		if d.Err() == nil && (nl > uint64(d.Len()) || nl > MaxSessionLocks) {
			return fmt.Errorf("session %d: %d locks", id, nl)
		}
		for j := uint64(0); j < nl && d.Err() == nil; j++ {
			key := d.String(MaxKeyLen)
			if d.Err() != nil {
				break
			}
			e := t.entries[key]
			if e == nil || !e.held() || e.holder.sess != nil || e.holder.name != holder ||
				e.expiry != s.expiry || e.ttl != s.ttl {
				return fmt.Errorf("session %d: lock %q is not its holder's", id, key)
			}
			t.releaseHolder(e.holder)
			e.holder = &s.ref
			s.ref.n++
			s.locks[e] = struct{}{}
		}
		nw := d.Uvarint()
		if d.Err() == nil && (nw > uint64(d.Len()) || nl+nw > MaxSessionLocks) {
			return fmt.Errorf("session %d: %d queue places", id, nw)
		}
		for j := uint64(0); j < nw && d.Err() == nil; j++ {
			key := d.String(MaxKeyLen)
			if d.Err() != nil {
				break
			}
			w := t.findWaiter(key, holder)
			if w == nil || w.sess != nil {
				return fmt.Errorf("session %d: no queue place on %q", id, key)
			}
			t.setWaiterSession(key, w, s)
		}
	}
	if err := d.end(); err != nil {
		return err
	}
	// Session locks live in their session, not in the expiry heap (which
	// checkRestored builds after the sections).
	t.expiries = slices.DeleteFunc(t.expiries, func(e *entry) bool { return e.holder.sess != nil })
	return nil
}

// findWaiter is holder's queue place on key, or nil.
func (t *Table) findWaiter(key, holder string) *waiter {
	e := t.entries[key]
	if e == nil {
		return nil
	}
	q := t.queueOf(e)
	if q == nil {
		return nil
	}
	for i := range q.waiters {
		if q.waiters[i].holder == holder {
			return &q.waiters[i]
		}
	}
	return nil
}

func encodeLockDelays(t *Table, b []byte) []byte {
	var held []*entry
	for e := range t.delays {
		held = append(held, e)
	}
	slices.SortFunc(held, func(a, b *entry) int { return cmpString(a.key, b.key) })
	type wd struct {
		key, holder string
		delay       Duration
	}
	var ws []wd
	for k, q := range t.waiting {
		for _, w := range q.waiters {
			if w.delay > 0 {
				ws = append(ws, wd{k, w.holder, w.delay})
			}
		}
	}
	slices.SortFunc(ws, func(a, b wd) int {
		if c := cmpString(a.key, b.key); c != 0 {
			return c
		}
		return cmpString(a.holder, b.holder)
	})
	var delayed []string
	for k := range t.delayed {
		delayed = append(delayed, k)
	}
	slices.Sort(delayed)
	if len(held) == 0 && len(ws) == 0 && len(delayed) == 0 {
		return b
	}
	b = binary.AppendUvarint(b, uint64(len(held)))
	for _, e := range held {
		b = appendString(b, e.key)
		b = binary.AppendVarint(b, int64(t.delays[e]))
	}
	b = binary.AppendUvarint(b, uint64(len(ws)))
	for _, w := range ws {
		b = appendString(b, w.key)
		b = appendString(b, w.holder)
		b = binary.AppendVarint(b, int64(w.delay))
	}
	b = binary.AppendUvarint(b, uint64(len(delayed)))
	for _, k := range delayed {
		b = appendString(b, k)
		b = binary.AppendVarint(b, int64(t.delayed[k]))
	}
	return b
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func decodeLockDelays(t *Table, p []byte) error {
	d := &decoder{binread.New(p)}
	okDelay := func(v Duration) bool { return v > 0 && v <= MaxLockDelay }
	n := d.Uvarint()
	if d.Err() == nil && n > uint64(d.Len()) {
		return fmt.Errorf("%d delays", n)
	}
	for i := uint64(0); i < n && d.Err() == nil; i++ {
		key, delay := d.String(MaxKeyLen), Duration(d.Varint())
		if d.Err() != nil {
			break
		}
		e := t.entries[key]
		if e == nil || !e.held() || !okDelay(delay) || t.delays[e] != 0 {
			return fmt.Errorf("bad lock-delay on %q", key)
		}
		t.setDelay(e, delay)
	}
	n = d.Uvarint()
	if d.Err() == nil && n > uint64(d.Len()) {
		return fmt.Errorf("%d waiter delays", n)
	}
	for i := uint64(0); i < n && d.Err() == nil; i++ {
		key, holder, delay := d.String(MaxKeyLen), d.String(MaxHolderLen), Duration(d.Varint())
		if d.Err() != nil {
			break
		}
		w := t.findWaiter(key, holder)
		if w == nil || w.delay != 0 || !okDelay(delay) {
			return fmt.Errorf("bad waiter lock-delay on %q", key)
		}
		w.delay = delay
	}
	n = d.Uvarint()
	if d.Err() == nil && n > uint64(d.Len()) {
		return fmt.Errorf("%d keys in delay", n)
	}
	for i := uint64(0); i < n && d.Err() == nil; i++ {
		key, until := d.String(MaxKeyLen), Time(d.Varint())
		if d.Err() != nil {
			break
		}
		if validateKey(key) != nil || t.delayed[key] != 0 {
			return fmt.Errorf("bad delay on %q", key)
		}
		if t.delayed == nil {
			t.delayed = map[string]Time{}
		}
		t.delayed[key] = until
	}
	return d.end()
}
