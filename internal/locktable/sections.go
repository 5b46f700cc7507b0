package locktable

import "encoding/binary"

// Snapshot sections (version 3). After the entries of version 2 come the
// sections, each
//
//	byte tag | uvarint length | length bytes of payload
//
// in increasing tag order, none empty, and no tag twice. A section holds
// one kind of state that plain leases and queues do not (sessions,
// semaphores, ...): its owner appends its payload in appendSections and
// reads it back in decodeSection, after the entries are restored. Tags are
// part of the snapshot format: never renumber one, never reuse one.
const (
	sectionNone      byte = 0 // not a section; the tags start at 1
	sectionSessions  byte = 1 // sessions, their locks and queue places
	sectionLockDelay byte = 2 // the lock-delays of leases, waiters and keys
	sectionShared    byte = 3 // semaphores and read/write locks
)

// section is one kind of state a snapshot may carry beyond version 2.
type section struct {
	tag byte
	// encode appends the payload for t, or returns b unchanged when t has
	// none of this state (then the section is left out).
	encode func(t *Table, b []byte) []byte
	// decode restores the payload into t, whose entries are already in
	// place; an error is reported as ErrCorrupt.
	decode func(t *Table, payload []byte) error
}

// sections lists every section kind in tag order.
var sections = []section{
	{tag: sectionSessions, encode: encodeSessions, decode: decodeSessions},
	{tag: sectionLockDelay, encode: encodeLockDelays, decode: decodeLockDelays},
	{tag: sectionShared, encode: appendShared, decode: decodeShared}, // semaphores and read/write locks
}

// appendSections appends every non-empty section of t to b.
func (t *Table) appendSections(b []byte) []byte {
	var payload []byte
	for _, s := range sections {
		payload = s.encode(t, payload[:0])
		if len(payload) == 0 {
			continue
		}
		b = append(b, s.tag)
		b = binary.AppendUvarint(b, uint64(len(payload)))
		b = append(b, payload...)
	}
	return b
}

// decodeSections reads the sections that follow the entries, to the end of d.
func (t *Table) decodeSections(d *decoder) error {
	last := sectionNone
	for d.Len() > 0 && d.Err() == nil {
		tag := d.Byte()
		payload := d.Bytes(d.Len())
		if d.Err() != nil {
			break
		}
		if tag <= last || len(payload) == 0 {
			return corrupt("section %d after %d, or empty", tag, last)
		}
		last = tag
		s, ok := sectionByTag(tag)
		if !ok {
			return corrupt("unknown section %d", tag)
		}
		if err := s.decode(t, payload); err != nil {
			return corrupt("section %d: %v", tag, err)
		}
	}
	if d.Err() != nil {
		return d.failure()
	}
	if last == sectionNone {
		return corrupt("version 3 without sections")
	}
	return nil
}

func sectionByTag(tag byte) (section, bool) {
	for _, s := range sections {
		if s.tag == tag {
			return s, true
		}
	}
	return section{}, false
}
