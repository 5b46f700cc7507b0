package node

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"

	wal "github.com/hashicorp/raft-wal"
)

// tailScan is the last log segment read frame by frame as raft-wal's own
// recovery reads it (segment/writer.go recoverTail, v0.4.2), and what
// lies after the point where that recovery stops.
//
// raft-wal takes any batch it cannot read at the end of the segment for
// a torn write and drops it, with everything after it. A torn write can
// only hit the last batch written: raft-wal appends a batch and fsyncs it
// before it writes the next one, and after a failed write or sync it
// writes the next batch at the same offset. So a whole batch (its commit
// frame's CRC matching) found after the one that stopped the recovery
// proves that batch, and the one that stopped it, were synced: the
// entries dropped were damaged after they were written, not torn.
type tailScan struct {
	path string
	base uint64 // the segment's base index (its file name)
	kept uint64 // entries raft-wal's recovery keeps
	// cut is the offset of the first batch that recovery drops (0: it
	// drops nothing); cutSealed: that batch holds an index frame, so
	// raft-wal takes the segment for sealed (nothing can be appended).
	cut       int
	cutSealed bool
	// later is the last index of the whole batches found after cut (0:
	// none).
	later uint64
}

// scanWALTail scans the last segment of the log in walDir; nil when
// there is none.
func scanWALTail(fsys FS, walDir string) (*tailScan, error) {
	names, err := walFiles(fsys, walDir)
	if err != nil || len(names) == 0 {
		return nil, err
	}
	path, err := lastSegment(fsys, walDir)
	if err != nil {
		return nil, err
	}
	var base uint64
	if _, err := fmt.Sscanf(filepath.Base(path), "%020d-", &base); err != nil {
		return nil, fmt.Errorf("%s: not a log segment's name", path)
	}
	b, err := fsys.ReadFile(path)
	if err != nil {
		return nil, err
	}
	s := &tailScan{path: path, base: base}
	s.scan(b)
	return s, nil
}

// frameSize is the size of a frame with n bytes of payload, padded to 8.
func frameSize(n int) int { return segFrameHeaderLen + n + (8-n%8)%8 }

func (s *tailScan) scan(b []byte) {
	type commit struct{ off, start, n int }
	var prev, final *commit
	entries, index := 0, -1
	off := segFileHeaderLen
	for off+segFrameHeaderLen <= len(b) {
		typ := b[off]
		if typ == 0 || typ > segFrameCommit {
			break // zeros (the end), or a header raft-wal cannot read
		}
		n := 0
		switch typ {
		case segFrameEntry:
			entries++
			n = int(binary.LittleEndian.Uint32(b[off+4:]))
		case segFrameIndex:
			index = off
			n = int(binary.LittleEndian.Uint32(b[off+4:]))
		case segFrameCommit:
			start := 0 // the first batch's CRC covers the file header
			if final != nil {
				start = final.off + segFrameHeaderLen
			}
			prev, final = final, &commit{off: off, start: start, n: entries}
		}
		off += frameSize(n)
	}
	switch {
	case final == nil:
		s.kept, s.cut = 0, segFileHeaderLen
	case final.n < entries:
		// Entries after the last commit frame: raft-wal keeps that
		// commit's batch without checking it.
		s.kept, s.cut = uint64(final.n), final.off+segFrameHeaderLen
	case binary.LittleEndian.Uint32(b[final.off+4:]) == crc32.Checksum(b[final.start:final.off], castagnoli):
		s.kept, s.cut = uint64(final.n), final.off+segFrameHeaderLen
	case prev == nil:
		s.kept, s.cut = 0, segFileHeaderLen
	default:
		s.kept, s.cut = uint64(prev.n), prev.off+segFrameHeaderLen
	}
	// raft-wal takes the segment for sealed if it read an index frame
	// anywhere, even in a batch it then dropped.
	s.cutSealed = index >= s.cut
	// Whole batches after the cut: try each frame boundary from it on;
	// the batches after the first one found follow it directly. A
	// commit frame whose CRC did not match from one start is not tried
	// from the later ones (every frame boundary of a damaged batch
	// leads to it).
	end := len(bytes.TrimRight(b, "\x00"))
	failed := map[int]bool{}
	for at := s.cut; at < end; at += 8 {
		last, next, ok := wholeBatch(b, at, failed)
		for ok && last > s.lastKept() {
			s.later = last
			last, next, ok = wholeBatch(b, next, failed)
		}
		if s.later > 0 {
			return
		}
	}
}

// wholeBatch reads the batch starting at offset at: entry frames (and an
// index frame) up to a commit frame whose CRC matches. It returns the
// index of its last entry and the offset after it. A commit frame whose
// CRC does not match is noted in failed.
func wholeBatch(b []byte, at int, failed map[int]bool) (last uint64, next int, ok bool) {
	start := at
	if at == segFileHeaderLen {
		start = 0
	}
	off, entries, firstEntry := at, 0, -1
	for off+segFrameHeaderLen <= len(b) {
		h := b[off : off+segFrameHeaderLen]
		if h[1] != 0 || h[2] != 0 || h[3] != 0 {
			return 0, 0, false // raft-wal writes these zero
		}
		n := int(binary.LittleEndian.Uint32(h[4:]))
		switch h[0] {
		case segFrameEntry:
			if off+frameSize(n) > len(b) {
				return 0, 0, false
			}
			if firstEntry < 0 {
				firstEntry = off + segFrameHeaderLen
			}
			entries++
			off += frameSize(n)
		case segFrameIndex:
			if entries == 0 || off+frameSize(n) > len(b) {
				return 0, 0, false
			}
			off += frameSize(n)
		case segFrameCommit:
			if entries == 0 || failed[off] {
				return 0, 0, false
			}
			if uint32(n) != crc32.Checksum(b[start:off], castagnoli) {
				failed[off] = true
				return 0, 0, false
			}
			// raft-wal's binary codec starts an entry with its index.
			first, k := binary.Uvarint(b[firstEntry:])
			if k <= 0 {
				return 0, 0, false
			}
			return first + uint64(entries) - 1, off + segFrameHeaderLen, true
		default:
			return 0, 0, false
		}
	}
	return 0, 0, false
}

// lastKept is the index of the last entry recovery keeps in the segment,
// or base-1 when it keeps none.
func (s *tailScan) lastKept() uint64 { return s.base + s.kept - 1 }

// cutTornSeal makes raft-wal's recovery stop before the batch at s.cut,
// a sealing batch that never completed: zeros over its first frame
// header. raft-wal would write its next batch there, had it not taken
// the segment for sealed.
func cutTornSeal(fsys FS, s *tailScan) error {
	f, err := fsys.OpenFile(s.path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	_, werr := f.WriteAt(make([]byte, segFrameHeaderLen), int64(s.cut))
	serr := f.Sync()
	return errors.Join(werr, serr, f.Close())
}

// rewrite closes the WAL, runs fix on its files and opens it again.
func (h *healingWAL) rewrite(fix func() error) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return wal.ErrClosed
	}
	if err := h.w.Close(); err != nil {
		h.log.Warn("closing the log for repair", "err", err)
	}
	ferr := fix()
	w, err := h.open()
	if err != nil {
		return errors.Join(ferr, err)
	}
	h.w = w
	return ferr
}

// cutTail zeros the last segment from s.cut to the end of its data, so
// that nothing after what raft-wal's recovery keeps is read again: what
// `fencelock recover` does to a tail it found damaged.
func cutTail(fsys FS, s *tailScan) error {
	b, err := fsys.ReadFile(s.path)
	if err != nil {
		return err
	}
	end := len(bytes.TrimRight(b, "\x00"))
	if end <= s.cut {
		return nil
	}
	f, err := fsys.OpenFile(s.path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	_, werr := f.WriteAt(make([]byte, end-s.cut), int64(s.cut))
	serr := f.Sync()
	return errors.Join(werr, serr, f.Close())
}
