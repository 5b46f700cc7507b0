package locktable

import (
	"encoding/binary"
	"fmt"
	"maps"
	"slices"

	"github.com/fencelock/fencelock/internal/locktable/snapshot"
)

// Section 3: semaphores and read/write locks, keys sorted, so equal tables
// encode to equal bytes:
//
//	uvarint keys | each: string key | byte kind | uvarint permits |
//	        uvarint holders | holders | uvarint waiters | waiters
//	holder: string name | byte write | uvarint slot | uvarint token |
//	        varint granted | varint expiry | varint ttl
//	waiter: string name | byte write | varint ttl | varint since | varint deadline
//
// Holders are in token order, waiters head first. A table without any
// multi-holder key has no section 3 (and is written as version 2).

func appendShared(t *Table, b []byte) []byte {
	if len(t.multi) == 0 {
		return b
	}
	keys := slices.Sorted(maps.Keys(t.multi))
	b = binary.AppendUvarint(b, uint64(len(keys)))
	for _, k := range keys {
		m := t.multi[k]
		b = snapshot.AppendString(b, k)
		b = append(b, byte(m.kind))
		b = binary.AppendUvarint(b, uint64(m.permits))
		b = binary.AppendUvarint(b, uint64(len(m.holders)))
		for _, h := range m.holders {
			b = snapshot.AppendString(b, h.e.holder.name)
			b = append(b, boolByte(h.write))
			b = binary.AppendUvarint(b, uint64(h.slot))
			b = binary.AppendUvarint(b, h.e.token)
			b = binary.AppendVarint(b, int64(h.e.granted))
			b = binary.AppendVarint(b, int64(h.e.expiry))
			b = binary.AppendVarint(b, int64(h.e.ttl))
		}
		b = binary.AppendUvarint(b, uint64(len(m.waiters)))
		for _, w := range m.waiters {
			b = snapshot.AppendString(b, w.holder)
			b = append(b, boolByte(w.write))
			b = binary.AppendVarint(b, int64(w.ttl))
			b = binary.AppendVarint(b, int64(w.since))
			b = binary.AppendVarint(b, int64(w.deadline))
		}
	}
	return b
}

func boolByte(v bool) byte {
	if v {
		return 1
	}
	return 0
}

// decodeShared restores section 3 into t, whose plain entries are in
// place. It refuses anything Table could not have produced: a key that is
// also an exclusive entry, a bad kind or limit, more holders than permits,
// a writer beside another holder, a holder twice, an empty key.
func decodeShared(t *Table, p []byte) error {
	d := snapshot.NewPayload(p)
	n := d.Uvarint()
	// Each key takes at least 5 bytes.
	if d.Err() == nil && (n == 0 || n > uint64(d.Len())/5) {
		return fmt.Errorf("%d keys", n)
	}
	t.multi = make(map[string]*multiKey, n)
	prev := ""
	for i := uint64(0); i < n && d.Err() == nil; i++ {
		key := d.String(MaxKeyLen)
		kind := Kind(d.Byte())
		permits := d.Uvarint()
		if d.Err() != nil {
			break
		}
		if err := validateKey(key); err != nil || (i > 0 && key <= prev) || t.keys.get(key) != nil {
			return fmt.Errorf("key %d: bad, out of order or also exclusive", i)
		}
		prev = key
		s := Shared{Kind: kind, Permits: int(permits)}
		if permits > MaxPermits || validateShared(s) != nil {
			return fmt.Errorf("key %d: kind %d, permits %d", i, kind, permits)
		}
		m := &multiKey{kind: kind, permits: int(permits)}
		seen := map[string]bool{}
		nh := d.Uvarint()
		if d.Err() == nil && (nh > MaxPermits || nh > uint64(d.Len())/7) {
			return fmt.Errorf("key %d: %d holders", i, nh)
		}
		var lastTok uint64
		for j := uint64(0); j < nh && d.Err() == nil; j++ {
			name := d.String(MaxHolderLen)
			write := d.Byte()
			slot := d.Uvarint()
			he := &entry{key: key, token: d.Uvarint(), granted: Time(d.Varint()), expiry: Time(d.Varint()), ttl: Duration(d.Varint()), multi: true}
			if d.Err() != nil {
				break
			}
			if validateHolder(name) != nil || seen[name] || write > 1 || he.token <= lastTok || he.token > t.last || he.ttl <= 0 || slot > MaxPermits {
				return fmt.Errorf("key %d: bad holder %d", i, j)
			}
			seen[name], lastTok = true, he.token
			he.holder = t.internHolder(name)
			m.holders = append(m.holders, sharedHolder{e: he, write: write == 1, slot: int(slot)})
		}
		nw := d.Uvarint()
		if d.Err() == nil && nw > uint64(d.Len())/5 {
			return fmt.Errorf("key %d: %d waiters", i, nw)
		}
		for j := uint64(0); j < nw && d.Err() == nil; j++ {
			name := d.String(MaxHolderLen)
			write := d.Byte()
			w := sharedWaiter{waiter: waiter{holder: name, ttl: Duration(d.Varint()), since: Time(d.Varint()), deadline: Time(d.Varint())}, write: write == 1}
			if d.Err() != nil {
				break
			}
			if validateHolder(name) != nil || seen[name] || write > 1 || w.ttl <= 0 {
				return fmt.Errorf("key %d: bad waiter %d", i, j)
			}
			seen[name] = true
			m.waiters = append(m.waiters, w)
		}
		if d.Err() != nil {
			break
		}
		if len(m.holders) == 0 && len(m.waiters) == 0 {
			return fmt.Errorf("key %d: empty", i)
		}
		if !m.validHolders() {
			return fmt.Errorf("key %d: holders break the %s's rule", i, kind)
		}
		for _, h := range m.holders {
			t.expiries = append(t.expiries, h.e)
		}
		t.queued += len(m.waiters)
		e := t.newEntry(key)
		e.multi = true
		t.multi[key] = m
	}
	return d.End()
}

// validHolders: never more holders than permits, never a writer beside
// another holder, no write mode on a semaphore.
func (m *multiKey) validHolders() bool {
	writers := 0
	for _, h := range m.holders {
		if h.write {
			writers++
		}
	}
	for _, w := range m.waiters {
		if w.write && m.kind != ReadWrite {
			return false
		}
	}
	slots := map[int]bool{}
	for _, h := range m.holders {
		if m.kind == Semaphore && (h.slot < 1 || h.slot > m.permits || slots[h.slot]) {
			return false
		}
		if m.kind != Semaphore && h.slot != 0 {
			return false
		}
		slots[h.slot] = true
	}
	if m.kind == Semaphore {
		return writers == 0 && len(m.holders) <= m.permits
	}
	return writers == 0 || len(m.holders) == 1
}
