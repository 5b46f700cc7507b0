package locktable

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"slices"
	"strings"

	"github.com/fencelock/fencelock/internal/binread"
)

// Snapshot format, version 2. Everything is little-endian varints or
// length-prefixed strings, entries sorted by key, so equal tables encode to
// equal bytes:
//
//	"FLT2" | uvarint last token | varint maxNow | uvarint holders | holders
//	holders:  string name, each once, in the order entries first name them
//	entries:  uvarint entries | each: uvarint shared | string suffix | byte flags |
//	          [lease] | [uvarint waiters | waiters]
//	key:      the previous entry's key cut to shared bytes, then suffix
//	flags:    1 held, 2 has waiters, 4 ttl is the previous lease's,
//	          8 expiry is granted+ttl
//	lease:    uvarint holder index | uvarint token | varint maxNow-granted |
//	          [varint ttl, unless flag 4] | [varint expiry-granted-ttl, unless flag 8]
//	waiter:   uvarint holder index | varint ttl | varint since | varint deadline
//	trailer:  4-byte CRC-32 (IEEE) of all the bytes before it
//
// Sorted keys mostly share a long prefix, holders are few, and most leases
// run from their grant for their ttl: about 16 bytes a lease with short
// names where version 1 took 76, which is what a snapshot of a million
// locks keeps in memory while it is written.
//
// Version 1 ("FLT1"), still read:
//
//	"FLT1" | uvarint last token | varint maxNow | uvarint entries
//	entries:  string key | byte held | [lease] | uvarint waiters | waiters
//	lease:    string holder | uvarint token | varint granted | varint expiry | varint ttl
//	waiter:   string holder | varint ttl | varint since | varint deadline
//	trailer:  4-byte CRC-32 (IEEE) of all the bytes before it
//
// Version 3 ("FLT3") is version 2 followed by sections for state beyond
// plain leases and queues. A table without any such state is written as
// version 2, so that a node that reads only version 2 can restore it.
const (
	snapshotMagic   = "FLT2"
	snapshotMagicV1 = "FLT1"
	snapshotMagicV3 = "FLT3"
)

const (
	flagHeld       = 1
	flagWaiters    = 2
	flagSameTTL    = 4
	flagPlainLease = 8
	flagsKnown     = 15
)

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
		if e.multi {
			continue // section 3
		}
		entries = append(entries, keyed{k, e})
	}
	slices.SortFunc(entries, func(a, b keyed) int { return strings.Compare(a.key, b.key) })
	// Number the holders in order of first use.
	index := make(map[string]uint64, len(t.holders))
	var names []string
	number := func(h string) {
		if _, ok := index[h]; !ok {
			index[h] = uint64(len(names))
			names = append(names, h)
		}
	}
	namesLen := 0
	for _, ke := range entries {
		if ke.e.held() {
			number(ke.e.holder.name)
		}
		for _, w := range t.waitersOf(ke.e) {
			number(w.holder)
		}
	}
	for _, n := range names {
		namesLen += len(n) + 2
	}
	// About 24 bytes a held lease with keys that share prefixes: one
	// allocation for most tables instead of a series of copies.
	b := slices.Grow(dst, len(entries)*24+namesLen+64)
	sections := t.appendSections(nil)
	if len(sections) == 0 {
		b = append(b, snapshotMagic...)
	} else {
		b = append(b, snapshotMagicV3...)
	}
	b = binary.AppendUvarint(b, t.last)
	b = binary.AppendVarint(b, int64(t.maxNow))
	b = binary.AppendUvarint(b, uint64(len(names)))
	for _, n := range names {
		b = appendString(b, n)
	}
	b = binary.AppendUvarint(b, uint64(len(entries)))
	prev := ""
	var prevTTL Duration
	for _, ke := range entries {
		e := ke.e
		shared := commonPrefix(prev, ke.key)
		b = binary.AppendUvarint(b, uint64(shared))
		b = appendString(b, ke.key[shared:])
		prev = ke.key
		var flags byte
		l := e.lease()
		ws := t.waitersOf(e)
		if e.held() {
			flags |= flagHeld
			if l.TTL == prevTTL {
				flags |= flagSameTTL
			}
			if l.Expiry == l.Granted+Time(l.TTL) {
				flags |= flagPlainLease
			}
		}
		if len(ws) > 0 {
			flags |= flagWaiters
		}
		b = append(b, flags)
		if e.held() {
			b = binary.AppendUvarint(b, index[l.Holder])
			b = binary.AppendUvarint(b, l.Token)
			b = binary.AppendVarint(b, int64(t.maxNow-l.Granted))
			if flags&flagSameTTL == 0 {
				b = binary.AppendVarint(b, int64(l.TTL))
			}
			if flags&flagPlainLease == 0 {
				b = binary.AppendVarint(b, int64(l.Expiry-l.Granted-Time(l.TTL)))
			}
			prevTTL = l.TTL
		}
		if len(ws) > 0 {
			b = binary.AppendUvarint(b, uint64(len(ws)))
			for _, w := range ws {
				b = binary.AppendUvarint(b, index[w.holder])
				b = binary.AppendVarint(b, int64(w.ttl))
				b = binary.AppendVarint(b, int64(w.since))
				b = binary.AppendVarint(b, int64(w.deadline))
			}
		}
	}
	b = append(b, sections...)
	return binary.LittleEndian.AppendUint32(b, crc32.ChecksumIEEE(b[start:])), nil
}

func commonPrefix(a, b string) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return n
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
	var (
		t   *Table
		err error
	)
	switch d := (&decoder{binread.New(body[len(snapshotMagic):])}); string(body[:len(snapshotMagic)]) {
	case snapshotMagic:
		t, err = decodeV2(d, false)
	case snapshotMagicV3:
		t, err = decodeV2(d, true)
	case snapshotMagicV1:
		t, err = decodeV1(d)
	default:
		return nil, corrupt("unknown format %q", body[:len(snapshotMagic)])
	}
	if err != nil {
		return nil, err
	}
	if err := t.checkRestored(); err != nil {
		return nil, err
	}
	t.recountOwners()
	return t, nil
}

func decodeV1(d *decoder) (*Table, error) {
	t := New()
	t.last = d.Uvarint()
	t.maxNow = Time(d.Varint())
	n := d.Uvarint()
	// Each entry takes at least 3 bytes, which bounds n before allocating.
	if d.Err() == nil && n > uint64(d.Len())/3 {
		return nil, corrupt("%d entries cannot fit in %d bytes", n, d.Len())
	}
	t.entries = make(map[string]*entry, n)
	t.expiries = make(expiryHeap, 0, n)
	prev := ""
	for i := uint64(0); i < n && d.Err() == nil; i++ {
		key := d.String(MaxKeyLen)
		if d.Err() != nil {
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
		switch d.Byte() {
		case 0:
		case 1:
			l := Lease{Key: key, Holder: d.String(MaxHolderLen), Token: d.Uvarint(),
				Granted: Time(d.Varint()), Expiry: Time(d.Varint()), TTL: Duration(d.Varint())}
			if d.Err() != nil {
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
			t.restoreLease(e, l)
		default:
			return nil, corrupt("entry %d: bad lease flag", i)
		}
		nw := d.Uvarint()
		if d.Err() == nil && nw > uint64(d.Len())/4 {
			return nil, corrupt("entry %d: %d waiters cannot fit", i, nw)
		}
		seen := map[string]bool{}
		var ws []waiter
		for j := uint64(0); j < nw && d.Err() == nil; j++ {
			w := waiter{holder: d.String(MaxHolderLen), ttl: Duration(d.Varint()), since: Time(d.Varint()), deadline: Time(d.Varint())}
			if d.Err() != nil {
				break
			}
			if err := validateHolder(w.holder); err != nil || w.ttl <= 0 || seen[w.holder] {
				return nil, corrupt("entry %d: bad waiter %d", i, j)
			}
			seen[w.holder] = true
			ws = append(ws, w)
		}
		if d.Err() == nil && !e.held() && len(ws) == 0 {
			return nil, corrupt("entry %d: empty", i)
		}
		t.setWaiters(e, ws)
	}
	if d.Err() != nil {
		return nil, d.failure()
	}
	if d.Len() != 0 {
		return nil, corrupt("%d trailing bytes", d.Len())
	}
	return t, nil
}

// checkRestored finishes a decoded table: it refuses duplicate tokens and
// orders the expiry heap.
func (t *Table) checkRestored() error {
	// Tokens are unique: a duplicate would mean two live records of one grant.
	tokens := make([]uint64, 0, len(t.expiries))
	for _, e := range t.entries {
		if e.held() {
			tokens = append(tokens, e.token) // session locks too
		}
	}
	slices.Sort(tokens)
	for i := 1; i < len(tokens); i++ {
		if tokens[i] == tokens[i-1] {
			return corrupt("token %d appears twice", tokens[i])
		}
	}
	for i, e := range t.expiries {
		e.heapIdx = int32(i)
	}
	heapInit(&t.expiries)
	return nil
}

// restoreLease gives e, fresh from newEntry, the decoded lease l.
func (t *Table) restoreLease(e *entry, l Lease) {
	e.holder = t.internHolder(l.Holder)
	e.token, e.granted, e.expiry, e.ttl = l.Token, l.Granted, l.Expiry, l.TTL
	t.expiries = append(t.expiries, e)
}

// decodeV2 decodes version 2, and version 3 when sections is set.
func decodeV2(d *decoder, sections bool) (*Table, error) {
	t := New()
	t.last = d.Uvarint()
	t.maxNow = Time(d.Varint())
	nh := d.Uvarint()
	// Each name takes at least 2 bytes, each entry at least 3: both bound
	// what is allocated before reading them.
	if d.Err() == nil && nh > uint64(d.Len())/2 {
		return nil, corrupt("%d holders cannot fit in %d bytes", nh, d.Len())
	}
	names := make([]string, 0, nh)
	seenName := make(map[string]bool, nh)
	for i := uint64(0); i < nh && d.Err() == nil; i++ {
		h := d.String(MaxHolderLen)
		if d.Err() != nil {
			break
		}
		if err := validateHolder(h); err != nil || seenName[h] {
			return nil, corrupt("bad holder %d", i)
		}
		seenName[h] = true
		names = append(names, h)
	}
	holder := func() (string, bool) {
		i := d.Uvarint()
		if d.Err() != nil || i >= uint64(len(names)) {
			return "", false
		}
		return names[i], true
	}
	n := d.Uvarint()
	if d.Err() == nil && n > uint64(d.Len())/3 {
		return nil, corrupt("%d entries cannot fit in %d bytes", n, d.Len())
	}
	if d.Err() != nil {
		return nil, d.failure()
	}
	t.entries = make(map[string]*entry, n)
	t.expiries = make(expiryHeap, 0, n)
	prev := ""
	var prevTTL Duration
	var kb []byte
	for i := uint64(0); i < n && d.Err() == nil; i++ {
		shared := d.Uvarint()
		suffix := d.Bytes(MaxKeyLen)
		flags := d.Byte()
		if d.Err() != nil {
			break
		}
		if shared > uint64(len(prev)) || flags&^flagsKnown != 0 || (flags&flagHeld == 0 && flags&(flagSameTTL|flagPlainLease) != 0) {
			return nil, corrupt("entry %d: bad key prefix or flags", i)
		}
		kb = append(append(kb[:0], prev[:shared]...), suffix...)
		key := string(kb)
		if err := validateKey(key); err != nil {
			return nil, corrupt("entry %d: %v", i, err)
		}
		if i > 0 && key <= prev {
			return nil, corrupt("entry %d: keys out of order", i)
		}
		prev = key
		e := t.newEntry(key)
		if flags&flagHeld != 0 {
			name, ok := holder()
			l := Lease{Key: key, Token: d.Uvarint(), Granted: t.maxNow - Time(d.Varint()), TTL: prevTTL}
			if flags&flagSameTTL == 0 {
				l.TTL = Duration(d.Varint())
			}
			l.Expiry = l.Granted + Time(l.TTL)
			if flags&flagPlainLease == 0 {
				l.Expiry += Time(d.Varint())
			}
			if d.Err() != nil {
				break
			}
			if !ok {
				return nil, corrupt("entry %d: bad holder", i)
			}
			if l.Token == 0 || l.Token > t.last {
				return nil, corrupt("entry %d: token %d outside 1..%d", i, l.Token, t.last)
			}
			if l.TTL <= 0 {
				return nil, corrupt("entry %d: ttl %d", i, l.TTL)
			}
			l.Holder = name
			t.restoreLease(e, l)
			prevTTL = l.TTL
		}
		if flags&flagWaiters != 0 {
			nw := d.Uvarint()
			if d.Err() == nil && (nw == 0 || nw > uint64(d.Len())/4) {
				return nil, corrupt("entry %d: %d waiters", i, nw)
			}
			var seen map[string]bool
			var ws []waiter
			for j := uint64(0); j < nw && d.Err() == nil; j++ {
				name, ok := holder()
				w := waiter{holder: name, ttl: Duration(d.Varint()), since: Time(d.Varint()), deadline: Time(d.Varint())}
				if d.Err() != nil {
					break
				}
				if !ok || w.ttl <= 0 || seen[w.holder] {
					return nil, corrupt("entry %d: bad waiter %d", i, j)
				}
				if seen == nil {
					seen = map[string]bool{}
				}
				seen[w.holder] = true
				ws = append(ws, w)
			}
			t.setWaiters(e, ws)
		}
		if d.Err() == nil && !e.held() && !e.queued {
			return nil, corrupt("entry %d: empty", i)
		}
	}
	if d.Err() != nil {
		return nil, d.failure()
	}
	if sections {
		if err := t.decodeSections(d); err != nil {
			return nil, err
		}
	}
	if d.Len() != 0 {
		return nil, corrupt("%d trailing bytes", d.Len())
	}
	return t, nil
}

// decoder reads a snapshot. Its failures are reported as ErrCorrupt.
type decoder struct{ binread.Reader }

// failure is d's first failure as a corrupt snapshot, nil if none.
func (d *decoder) failure() error {
	if err := d.Err(); err != nil {
		return fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return nil
}

// end is a section's error once it is read: the first failure, or bytes
// left after its last field.
func (d *decoder) end() error {
	if err := d.failure(); err != nil {
		return err
	}
	if d.Len() != 0 {
		return fmt.Errorf("%d trailing bytes", d.Len())
	}
	return nil
}
