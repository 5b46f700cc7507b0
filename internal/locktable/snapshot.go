package locktable

import (
	"errors"
	"fmt"
	"slices"

	"github.com/fencelock/fencelock/internal/locktable/snapshot"
)

// Snapshots are written in package snapshot's format: the exclusive keys
// as its entries, each other kind of state in a section of its own
// (sections.go). Restoring refuses whatever the table could not have
// produced, and leaves the table as it was.

// MarshalBinary encodes the table deterministically.
func (t *Table) MarshalBinary() ([]byte, error) {
	return t.AppendBinary(nil)
}

// AppendBinary appends the table's encoding to dst.
func (t *Table) AppendBinary(dst []byte) ([]byte, error) {
	// The ordered index walks the keys sorted, touching each entry once a
	// pass; the multi-holder keys are section 3's.
	exclusive := func(yield func(*entry) bool) {
		t.index.Ascend(func(e *entry) bool { return e.multi || yield(e) })
	}
	n := 0
	for range exclusive {
		n++
	}
	names := func(yield func(string) bool) {
		for e := range exclusive {
			if e.held() && !yield(e.holder.name) {
				return
			}
			for _, w := range t.waitersOf(e) {
				if !yield(w.holder) {
					return
				}
			}
		}
	}
	each := func(yield func(*snapshot.Entry) bool) {
		var rec snapshot.Entry
		for e := range exclusive {
			rec = snapshot.Entry{Key: e.key, Held: e.held(), Waiters: rec.Waiters[:0]}
			if rec.Held {
				l := e.lease()
				rec.Lease = snapshot.Lease{Holder: l.Holder, Token: l.Token, Granted: int64(l.Granted), Expiry: int64(l.Expiry), TTL: int64(l.TTL)}
			}
			for _, w := range t.waitersOf(e) {
				rec.Waiters = append(rec.Waiters, snapshot.Waiter{Holder: w.holder, TTL: int64(w.ttl), Since: int64(w.since), Deadline: int64(w.deadline)})
			}
			if !yield(&rec) {
				return
			}
		}
	}
	return snapshot.Append(dst, snapshot.Header{Last: t.last, MaxNow: int64(t.maxNow)},
		snapshot.Entries{N: n, Names: names, Holders: len(t.holders), Each: each}, t.encodeSections()), nil
}

// UnmarshalBinary replaces the table's whole state with the decoded
// snapshot. On any error (ErrCorrupt) the table is left as it was. The
// observer is kept.
func (t *Table) UnmarshalBinary(data []byte) error {
	fresh, err := decode(data)
	if err != nil {
		return err
	}
	fresh.observe = t.observe
	*t = *fresh
	return nil
}

func decode(data []byte) (*Table, error) {
	t := New()
	sections, err := snapshot.Read(data, snapshot.Limits{Key: MaxKeyLen, Holder: MaxHolderLen}, snapshot.Restore{
		Header: func(h snapshot.Header, n int) error {
			t.last, t.maxNow = h.Last, Time(h.MaxNow)
			t.keys = newKeyIndexFor(n)
			t.expiries = make(expiryHeap, 0, n)
			return nil
		},
		Entry: t.restoreEntry,
	})
	if err == nil {
		err = t.decodeSections(sections)
	}
	if err == nil {
		err = t.checkRestored()
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	t.recountOwners()
	return t, nil
}

// restoreEntry restores one exclusive key: its lease record and its queue.
func (t *Table) restoreEntry(r *snapshot.Entry) error {
	if err := validateKey(r.Key); err != nil {
		return err
	}
	e := t.newEntry(r.Key)
	if r.Held {
		l := Lease{Key: r.Key, Holder: r.Lease.Holder, Token: r.Lease.Token,
			Granted: Time(r.Lease.Granted), Expiry: Time(r.Lease.Expiry), TTL: Duration(r.Lease.TTL)}
		if err := validateHolder(l.Holder); err != nil {
			return err
		}
		if l.Token == 0 || l.Token > t.last {
			return fmt.Errorf("token %d outside 1..%d", l.Token, t.last)
		}
		if l.TTL <= 0 {
			return fmt.Errorf("ttl %d", l.TTL)
		}
		t.restoreLease(e, l)
	}
	var ws []waiter
	var seen map[string]bool
	for j, w := range r.Waiters {
		if validateHolder(w.Holder) != nil || w.TTL <= 0 || seen[w.Holder] {
			return fmt.Errorf("bad waiter %d", j)
		}
		if seen == nil {
			seen = map[string]bool{}
		}
		seen[w.Holder] = true
		ws = append(ws, waiter{holder: w.Holder, ttl: Duration(w.TTL), since: Time(w.Since), deadline: Time(w.Deadline)})
	}
	if !r.Held && len(ws) == 0 {
		return errors.New("empty")
	}
	t.setWaiters(e, ws)
	return nil
}

// restoreLease gives e, fresh from newEntry, the decoded lease l.
func (t *Table) restoreLease(e *entry, l Lease) {
	e.holder = t.internHolder(l.Holder)
	e.token, e.granted, e.expiry, e.ttl = l.Token, l.Granted, l.Expiry, l.TTL
	t.expiries = append(t.expiries, e)
}

// checkRestored finishes a decoded table: it refuses duplicate tokens and
// orders the expiry heap.
func (t *Table) checkRestored() error {
	// Tokens are unique: a duplicate would mean two live records of one grant.
	tokens := make([]uint64, 0, len(t.expiries))
	t.index.Ascend(func(e *entry) bool {
		if e.held() {
			tokens = append(tokens, e.token) // session locks too
		}
		return true
	})
	slices.Sort(tokens)
	for i := 1; i < len(tokens); i++ {
		if tokens[i] == tokens[i-1] {
			return fmt.Errorf("token %d appears twice", tokens[i])
		}
	}
	for i, e := range t.expiries {
		e.heapIdx = int32(i)
	}
	heapInit(&t.expiries)
	return nil
}
