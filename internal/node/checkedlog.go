package node

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/hashicorp/raft"
)

// checkedLog is the raft log store with a checksum on every entry and a
// watermark of what it has durably stored.
//
// raft-wal checks only the last batch of the segment being written (a
// torn batch is dropped silently at open) and nothing in sealed segments,
// so a flipped byte in an older entry would be applied as if it had been
// written. checkedLog puts a CRC-32C of the entry's index, term, type,
// data and extensions in front of the entry's Extensions, with a magic
// prefix, and strips it on read. Entries written before checksums (index
// below the state file's CRCFrom) may lack it and are read as they are.
//
// After each append it records the last index in the state file (no
// fsync of its own: the log's fsync has made the entries durable, and the
// checkpoint timer and each token reservation sync the record), so that a
// log found shorter at the next start is known to have lost entries.
type checkedLog struct {
	inner interface {
		raft.LogStore
		raft.MonotonicLogStore
	}
	state   *stateFile
	crcFrom uint64
}

var (
	_ raft.LogStore          = (*checkedLog)(nil)
	_ raft.MonotonicLogStore = (*checkedLog)(nil)
)

// entryMagic starts the Extensions of a checksummed entry; the CRC follows.
const (
	entryMagic      = "FLC\x01"
	entryTrailerLen = len(entryMagic) + 4
)

// errEntryCorrupt: an entry's checksum or index does not match.
var errEntryCorrupt = errors.New("entry checksum mismatch")

func entrySum(l *raft.Log, ext []byte) uint32 {
	// The header's 25 bytes go through the table here, not crc32.Update:
	// crc32 takes what it sums through a function value, so a buffer
	// given to it escapes, an allocation for every entry read (a
	// restart reads each three times).
	var h [25]byte
	binary.LittleEndian.PutUint64(h[0:], l.Index)
	binary.LittleEndian.PutUint64(h[8:], l.Term)
	h[16] = byte(l.Type)
	binary.LittleEndian.PutUint64(h[17:], uint64(len(l.Data)))
	sum := ^uint32(0)
	for _, b := range h {
		sum = castagnoli[byte(sum)^b] ^ sum>>8
	}
	sum = crc32.Update(^sum, castagnoli, l.Data)
	return crc32.Update(sum, castagnoli, ext)
}

// sealEntry returns a copy of l that carries its checksum.
func sealEntry(l *raft.Log) *raft.Log {
	c := *l
	ext := make([]byte, 0, entryTrailerLen+len(l.Extensions))
	ext = append(ext, entryMagic...)
	ext = binary.LittleEndian.AppendUint32(ext, entrySum(l, l.Extensions))
	c.Extensions = append(ext, l.Extensions...)
	return &c
}

// openEntry checks and strips l's checksum in place. want is whether the
// entry must carry one.
func openEntry(l *raft.Log, want bool) error {
	ext := l.Extensions
	if len(ext) < entryTrailerLen || string(ext[:len(entryMagic)]) != entryMagic {
		if want {
			return fmt.Errorf("%w: entry %d carries no checksum", errEntryCorrupt, l.Index)
		}
		return nil
	}
	orig := ext[entryTrailerLen:]
	if len(orig) == 0 {
		orig = nil
	}
	if binary.LittleEndian.Uint32(ext[len(entryMagic):]) != entrySum(l, orig) {
		return fmt.Errorf("%w: entry %d", errEntryCorrupt, l.Index)
	}
	l.Extensions = orig
	return nil
}

func (c *checkedLog) FirstIndex() (uint64, error) { return c.inner.FirstIndex() }
func (c *checkedLog) LastIndex() (uint64, error)  { return c.inner.LastIndex() }
func (c *checkedLog) IsMonotonic() bool           { return c.inner.IsMonotonic() }

func (c *checkedLog) GetLog(index uint64, l *raft.Log) error {
	if err := c.inner.GetLog(index, l); err != nil {
		return err
	}
	if l.Index != index {
		return fmt.Errorf("%w: entry %d read where %d was asked", errEntryCorrupt, l.Index, index)
	}
	return openEntry(l, c.crcFrom > 0 && index >= c.crcFrom)
}

func (c *checkedLog) StoreLog(l *raft.Log) error { return c.StoreLogs([]*raft.Log{l}) }

func (c *checkedLog) StoreLogs(logs []*raft.Log) error {
	if len(logs) == 0 {
		return nil
	}
	sealed := make([]*raft.Log, len(logs))
	for i, l := range logs {
		sealed[i] = sealEntry(l)
	}
	if err := c.inner.StoreLogs(sealed); err != nil {
		return err
	}
	last := logs[len(logs)-1].Index
	return c.state.update(func(s *dirState) { s.Durable = max(s.Durable, last) }, false)
}

// DeleteRange deletes [lo, hi]. A deletion of the log's suffix (raft
// replacing entries that a new leader did not keep, or dropping the whole
// log after installing a snapshot) first lowers the watermark, durably,
// so that a crash right after it is not taken for a lost tail.
func (c *checkedLog) DeleteRange(lo, hi uint64) error {
	last, err := c.inner.LastIndex()
	if err != nil {
		return err
	}
	if hi >= last && lo > 0 {
		if err := c.state.update(func(s *dirState) { s.Durable = min(s.Durable, lo-1) }, true); err != nil {
			return err
		}
	}
	return c.inner.DeleteRange(lo, hi)
}
