package snapshot

import (
	"encoding/binary"
	"hash/crc32"
	"slices"
)

// The versions' first bytes.
const (
	MagicV1 = "FLT1"
	MagicV2 = "FLT2"
	MagicV3 = "FLT3"
)

// The flags of a version 2 entry.
const (
	flagHeld       = 1
	flagWaiters    = 2
	flagSameTTL    = 4
	flagPlainLease = 8
	flagsKnown     = 15
)

// Header is what a snapshot holds before its entries: the table's token
// counter and clock.
type Header struct {
	Last   uint64 // the last token issued; 0 before the first
	MaxNow int64  // the largest now the table was given
}

// Entry is one exclusive key: its lease record, when it has one (alive or
// not), and its wait queue, head first.
type Entry struct {
	Key     string
	Held    bool
	Lease   Lease
	Waiters []Waiter
}

// Lease is a lease record. Times are the table's, in nanoseconds.
type Lease struct {
	Holder               string
	Token                uint64
	Granted, Expiry, TTL int64
}

// Waiter is one place in a wait queue.
type Waiter struct {
	Holder               string
	TTL, Since, Deadline int64
}

// Section is the state of one other kind, by tag; its payload is the
// owner's encoding.
type Section struct {
	Tag     byte
	Payload []byte
}

// Entries are a table's exclusive keys, for Append.
type Entries struct {
	N int // how many
	// Names yields the holder of each entry's lease and queue, entry by
	// entry in key order, as Each will: the holders are numbered in the
	// order of their first use. Holders is about how many distinct names
	// it yields: a size hint.
	Names   func(yield func(name string) bool)
	Holders int
	// Each yields the entries in increasing key order. Append keeps
	// nothing of an Entry past the yield.
	Each func(yield func(*Entry) bool)
}

// Append appends the snapshot of h, the entries and the sections (in
// increasing tag order, none empty) to dst: version 2 when there are no
// sections, else version 3.
func Append(dst []byte, h Header, entries Entries, sections []Section) []byte {
	start := len(dst)
	// Number the holders in order of first use.
	index := make(map[string]uint64, entries.Holders)
	var names []string
	namesLen := 0
	number := func(h string) {
		if _, ok := index[h]; !ok {
			index[h] = uint64(len(names))
			names = append(names, h)
			namesLen += len(h) + 2
		}
	}
	for name := range entries.Names {
		number(name)
	}
	// About 24 bytes a held lease with keys that share prefixes: one
	// allocation for most tables instead of a series of copies.
	b := slices.Grow(dst, entries.N*24+namesLen+64)
	if len(sections) == 0 {
		b = append(b, MagicV2...)
	} else {
		b = append(b, MagicV3...)
	}
	b = binary.AppendUvarint(b, h.Last)
	b = binary.AppendVarint(b, h.MaxNow)
	b = binary.AppendUvarint(b, uint64(len(names)))
	for _, n := range names {
		b = AppendString(b, n)
	}
	b = binary.AppendUvarint(b, uint64(entries.N))
	prev := ""
	var prevTTL int64
	for e := range entries.Each {
		shared := commonPrefix(prev, e.Key)
		b = binary.AppendUvarint(b, uint64(shared))
		b = AppendString(b, e.Key[shared:])
		prev = e.Key
		var flags byte
		l := e.Lease
		if e.Held {
			flags |= flagHeld
			if l.TTL == prevTTL {
				flags |= flagSameTTL
			}
			if l.Expiry == l.Granted+l.TTL {
				flags |= flagPlainLease
			}
		}
		if len(e.Waiters) > 0 {
			flags |= flagWaiters
		}
		b = append(b, flags)
		if e.Held {
			b = binary.AppendUvarint(b, index[l.Holder])
			b = binary.AppendUvarint(b, l.Token)
			b = binary.AppendVarint(b, h.MaxNow-l.Granted)
			if flags&flagSameTTL == 0 {
				b = binary.AppendVarint(b, l.TTL)
			}
			if flags&flagPlainLease == 0 {
				b = binary.AppendVarint(b, l.Expiry-l.Granted-l.TTL)
			}
			prevTTL = l.TTL
		}
		if len(e.Waiters) > 0 {
			b = binary.AppendUvarint(b, uint64(len(e.Waiters)))
			for _, w := range e.Waiters {
				b = binary.AppendUvarint(b, index[w.Holder])
				b = binary.AppendVarint(b, w.TTL)
				b = binary.AppendVarint(b, w.Since)
				b = binary.AppendVarint(b, w.Deadline)
			}
		}
	}
	for _, s := range sections {
		b = append(b, s.Tag)
		b = binary.AppendUvarint(b, uint64(len(s.Payload)))
		b = append(b, s.Payload...)
	}
	return binary.LittleEndian.AppendUint32(b, crc32.ChecksumIEEE(b[start:]))
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

// AppendString appends s, its length first: how a snapshot writes every
// string, in the sections' payloads too.
func AppendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}
