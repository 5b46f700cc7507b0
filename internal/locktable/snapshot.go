package locktable

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"slices"
	"strings"
)

// Snapshot format, version 1. Everything is little-endian varints or
// length-prefixed strings, entries sorted by key, so equal tables encode to
// equal bytes:
//
//	"FLT1" | uvarint last token | varint maxNow | uvarint entries
//	entries:  string key | byte held | [lease] | uvarint waiters | waiters
//	lease:    string holder | uvarint token | varint granted | varint expiry | varint ttl
//	waiter:   string holder | varint ttl | varint since | varint deadline
//	trailer:  4-byte CRC-32 (IEEE) of all the bytes before it
const snapshotMagic = "FLT1"

// MarshalBinary encodes the table deterministically.
func (t *Table) MarshalBinary() ([]byte, error) {
	return t.AppendBinary(nil)
}

// AppendBinary appends the table's encoding to dst.
func (t *Table) AppendBinary(dst []byte) ([]byte, error) {
	start := len(dst)
	// Sort (key, entry) pairs: comparing keys held in the slice itself
	// touches no entry, which matters with a million of them.
	type keyed struct {
		key string
		e   *entry
	}
	entries := make([]keyed, 0, len(t.entries))
	for k, e := range t.entries {
		entries = append(entries, keyed{k, e})
	}
	slices.SortFunc(entries, func(a, b keyed) int { return strings.Compare(a.key, b.key) })
	// About 64 bytes a held lease with short names: one allocation for most
	// tables instead of a doubling series of copies.
	b := slices.Grow(dst, len(entries)*64+64)
	b = append(b, snapshotMagic...)
	b = binary.AppendUvarint(b, t.last)
	b = binary.AppendVarint(b, int64(t.maxNow))
	b = binary.AppendUvarint(b, uint64(len(entries)))
	for _, ke := range entries {
		e := ke.e
		b = appendString(b, ke.key)
		if e.held {
			l := e.lease
			b = append(b, 1)
			b = appendString(b, l.Holder)
			b = binary.AppendUvarint(b, l.Token)
			b = binary.AppendVarint(b, int64(l.Granted))
			b = binary.AppendVarint(b, int64(l.Expiry))
			b = binary.AppendVarint(b, int64(l.TTL))
		} else {
			b = append(b, 0)
		}
		b = binary.AppendUvarint(b, uint64(len(e.waiters)))
		for _, w := range e.waiters {
			b = appendString(b, w.holder)
			b = binary.AppendVarint(b, int64(w.ttl))
			b = binary.AppendVarint(b, int64(w.since))
			b = binary.AppendVarint(b, int64(w.deadline))
		}
	}
	return binary.LittleEndian.AppendUint32(b, crc32.ChecksumIEEE(b[start:])), nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
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

func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...))
}

func decode(data []byte) (*Table, error) {
	if len(data) < len(snapshotMagic)+4 {
		return nil, corrupt("%d bytes is too short", len(data))
	}
	body, sum := data[:len(data)-4], binary.LittleEndian.Uint32(data[len(data)-4:])
	if got := crc32.ChecksumIEEE(body); got != sum {
		return nil, corrupt("checksum %08x, want %08x", got, sum)
	}
	if string(body[:len(snapshotMagic)]) != snapshotMagic {
		return nil, corrupt("unknown format %q", body[:len(snapshotMagic)])
	}
	d := decoder{b: body[len(snapshotMagic):]}
	t := New()
	t.last = d.uvarint()
	t.maxNow = Time(d.varint())
	n := d.uvarint()
	// Each entry takes at least 3 bytes, which bounds n before allocating.
	if d.err == nil && n > uint64(len(d.b))/3 {
		return nil, corrupt("%d entries cannot fit in %d bytes", n, len(d.b))
	}
	t.entries = make(map[string]*entry, n)
	t.expiries = make(expiryHeap, 0, n)
	prev := ""
	for i := uint64(0); i < n && d.err == nil; i++ {
		key := d.string(MaxKeyLen)
		if d.err != nil {
			break
		}
		if err := validateKey(key); err != nil {
			return nil, corrupt("entry %d: %v", i, err)
		}
		if i > 0 && key <= prev {
			return nil, corrupt("entry %d: keys out of order", i)
		}
		prev = key
		e := t.newEntry(key)
		switch d.byte() {
		case 0:
		case 1:
			l := Lease{Key: key, Holder: d.string(MaxHolderLen), Token: d.uvarint(),
				Granted: Time(d.varint()), Expiry: Time(d.varint()), TTL: Duration(d.varint())}
			if d.err != nil {
				break
			}
			if err := validateHolder(l.Holder); err != nil {
				return nil, corrupt("entry %d: %v", i, err)
			}
			if l.Token == 0 || l.Token > t.last {
				return nil, corrupt("entry %d: token %d outside 1..%d", i, l.Token, t.last)
			}
			if l.TTL <= 0 {
				return nil, corrupt("entry %d: ttl %d", i, l.TTL)
			}
			l.Holder = t.internHolder(l.Holder)
			e.lease, e.held = l, true
			t.expiries = append(t.expiries, e)
		default:
			return nil, corrupt("entry %d: bad lease flag", i)
		}
		nw := d.uvarint()
		if d.err == nil && nw > uint64(len(d.b))/4 {
			return nil, corrupt("entry %d: %d waiters cannot fit", i, nw)
		}
		seen := map[string]bool{}
		for j := uint64(0); j < nw && d.err == nil; j++ {
			w := waiter{holder: d.string(MaxHolderLen), ttl: Duration(d.varint()), since: Time(d.varint()), deadline: Time(d.varint())}
			if d.err != nil {
				break
			}
			if err := validateHolder(w.holder); err != nil || w.ttl <= 0 || seen[w.holder] {
				return nil, corrupt("entry %d: bad waiter %d", i, j)
			}
			seen[w.holder] = true
			e.waiters = append(e.waiters, w)
		}
		if d.err == nil && !e.held && len(e.waiters) == 0 {
			return nil, corrupt("entry %d: empty", i)
		}
		if len(e.waiters) > 0 {
			t.waiting[key] = e
		}
	}
	if d.err != nil {
		return nil, d.err
	}
	if len(d.b) != 0 {
		return nil, corrupt("%d trailing bytes", len(d.b))
	}
	// Tokens are unique: a duplicate would mean two live records of one grant.
	tokens := make([]uint64, len(t.expiries))
	for i, e := range t.expiries {
		tokens[i] = e.lease.Token
	}
	slices.Sort(tokens)
	for i := 1; i < len(tokens); i++ {
		if tokens[i] == tokens[i-1] {
			return nil, corrupt("token %d appears twice", tokens[i])
		}
	}
	for i, e := range t.expiries {
		e.heapIdx = int32(i)
	}
	heapInit(&t.expiries)
	return t, nil
}

type decoder struct {
	b   []byte
	err error
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = corrupt("bad uvarint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.err = corrupt("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) byte() byte {
	if d.err != nil {
		return 0
	}
	if len(d.b) == 0 {
		d.err = corrupt("truncated")
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) string(limit int) string {
	n := d.uvarint()
	if d.err != nil {
		return ""
	}
	if n > uint64(limit) || n > uint64(len(d.b)) {
		d.err = corrupt("string of %d bytes", n)
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}
