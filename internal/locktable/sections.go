package locktable

import (
	"fmt"

	"github.com/fencelock/fencelock/internal/locktable/snapshot"
)

// Snapshot sections (version 3). A section holds one kind of state that
// plain leases and queues do not (sessions, semaphores, ...): its owner
// appends its payload in encode and reads it back in decode, after the
// entries are restored; package snapshot frames them. Tags are part of
// the snapshot format: never renumber one, never reuse one.
const (
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

// encodeSections is every non-empty section of t, in tag order.
func (t *Table) encodeSections() []snapshot.Section {
	var out []snapshot.Section
	for _, s := range sections {
		if p := s.encode(t, nil); len(p) > 0 {
			out = append(out, snapshot.Section{Tag: s.tag, Payload: p})
		}
	}
	return out
}

// decodeSections restores the sections read after the entries.
func (t *Table) decodeSections(list []snapshot.Section) error {
	for _, p := range list {
		s, ok := sectionByTag(p.Tag)
		if !ok {
			return fmt.Errorf("unknown section %d", p.Tag)
		}
		if err := s.decode(t, p.Payload); err != nil {
			return fmt.Errorf("section %d: %w", p.Tag, err)
		}
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
