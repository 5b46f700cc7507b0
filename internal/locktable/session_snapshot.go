package locktable

import (
	"encoding/binary"
	"fmt"
	"maps"
	"slices"

	"github.com/fencelock/fencelock/internal/locktable/snapshot"
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

func encodeSessions(t *Table, b []byte) []byte {
	st := t.sessions
	if st == nil || st.last == 0 {
		return b
	}
	ids := slices.Sorted(maps.Keys(st.byID))
	b = binary.AppendUvarint(b, st.last)
	b = binary.AppendUvarint(b, uint64(len(ids)))
	for _, id := range ids {
		s := st.byID[id]
		b = binary.AppendUvarint(b, s.id)
		b = snapshot.AppendString(b, s.ref.name)
		b = binary.AppendVarint(b, int64(s.ttl))
		b = binary.AppendVarint(b, int64(s.created))
		b = binary.AppendVarint(b, int64(s.expiry))
		keys := sortedKeys(s)
		b = binary.AppendUvarint(b, uint64(len(keys)))
		for _, k := range keys {
			b = snapshot.AppendString(b, k)
		}
		waits := slices.Sorted(maps.Keys(s.waits))
		b = binary.AppendUvarint(b, uint64(len(waits)))
		for _, k := range waits {
			b = snapshot.AppendString(b, k)
		}
	}
	return b
}

func decodeSessions(t *Table, p []byte) error {
	d := snapshot.NewPayload(p)
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
			e := t.keys.get(key)
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
	if err := d.End(); err != nil {
		return err
	}
	// Session locks live in their session, not in the expiry heap (which
	// checkRestored builds after the sections).
	t.expiries = slices.DeleteFunc(t.expiries, func(e *entry) bool { return e.holder.sess != nil })
	return nil
}

// findWaiter is holder's queue place on key, or nil.
func (t *Table) findWaiter(key, holder string) *waiter {
	e := t.keys.get(key)
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
