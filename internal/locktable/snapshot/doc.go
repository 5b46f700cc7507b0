// Package snapshot is the byte format of a lock table's snapshot, and only
// that: Append writes records — a header, every exclusive key with its
// lease record and wait queue, then sections for other kinds of state —
// and Read hands them back, refusing bytes that do not follow the format.
// What the records mean (whether a token was issued, whether a waiter may
// queue twice) is the table's to check as it restores them; a section's
// payload is written and read by the kind of state that owns it.
//
// Version 2. Everything is little-endian varints or length-prefixed
// strings, entries sorted by key, so equal tables encode to equal bytes:
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
// Version 3 ("FLT3") is version 2 with sections between the entries and
// the trailer, each
//
//	byte tag | uvarint length | length bytes of payload
//
// in increasing tag order, none empty, and no tag twice. A table without
// any such state is written as version 2, so that a node that reads only
// version 2 can restore it.
package snapshot
