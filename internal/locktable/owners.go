package locktable

import "strings"

// Counts by owner. A holder's owner is its name up to its first "/" (the
// whole name when it has none): holders "bob", "bob/1" and "bob/w/2" are
// one owner's. The server binds holders to principals this way, and caps
// what one principal may pin (sessions, locks held, queue places) by
// these counts, kept as the table changes so that a check costs one map
// lookup.

// OwnerCount is what one owner's holders have in the table: leases
// (alive, or expired and not yet ended by a Tick or a lookup), places in
// wait queues, and open sessions.
type OwnerCount struct {
	Locks, Waits, Sessions int
}

// OwnerOf is holder's owner.
func OwnerOf(holder string) string {
	if i := strings.IndexByte(holder, '/'); i >= 0 {
		return holder[:i]
	}
	return holder
}

// Owner is owner's count now.
func (t *Table) Owner(owner string) OwnerCount {
	if c := t.owners[owner]; c != nil {
		return *c
	}
	return OwnerCount{}
}

// own adds to the count of holder's owner. Owners left with nothing are
// forgotten in sweeps, once they are at least half of those kept (as
// holder names are), so that one that takes and releases a lock over and
// over does not allocate its count each time.
func (t *Table) own(holder string, locks, waits, sessions int) {
	o := OwnerOf(holder)
	c := t.owners[o]
	switch {
	case c == nil:
		c = &OwnerCount{}
		t.owners[strings.Clone(o)] = c
	case *c == (OwnerCount{}):
		t.idleOwners--
	}
	c.Locks += locks
	c.Waits += waits
	c.Sessions += sessions
	if *c != (OwnerCount{}) {
		return
	}
	if t.idleOwners++; t.idleOwners > 64 && t.idleOwners*2 > len(t.owners) {
		for k, c := range t.owners {
			if *c == (OwnerCount{}) {
				delete(t.owners, k)
			}
		}
		t.idleOwners = 0
	}
}

// recountOwners counts every owner again from the table (after a
// snapshot is decoded).
func (t *Table) recountOwners() {
	t.owners, t.idleOwners = map[string]*OwnerCount{}, 0
	for _, r := range t.holders {
		if r.n > 0 {
			t.own(r.name, r.n, 0, 0)
		}
	}
	for _, q := range t.waiting {
		for _, w := range q.waiters {
			t.own(w.holder, 0, 1, 0)
		}
	}
	for _, m := range t.multi {
		for _, w := range m.waiters {
			t.own(w.holder, 0, 1, 0)
		}
	}
	if t.sessions != nil {
		for _, s := range t.sessions.byID {
			t.own(s.ref.name, s.ref.n, 0, 1)
		}
	}
}

// hold counts one more lease carried by r; unhold one fewer.
func (t *Table) hold(r *holderRef) {
	r.n++
	t.own(r.name, 1, 0, 0)
}

func (t *Table) unhold(r *holderRef) {
	r.n--
	t.own(r.name, -1, 0, 0)
}

// Counted reports whether holder already has a lease record or a queue
// place on key, so that a grant or a wait there adds nothing to its
// owner's count (a renewal, a wait sent again).
func (t *Table) Counted(key, holder string) bool {
	e := t.keys.get(key)
	if e == nil {
		return false
	}
	if m := t.multi[key]; e.multi && m != nil {
		return m.holderIndex(holder) >= 0 || m.waiterIndex(holder) >= 0
	}
	if e.held() && e.holder.name == holder {
		return true
	}
	for _, w := range t.waitersOf(e) {
		if w.holder == holder {
			return true
		}
	}
	return false
}
