package node

import (
	"encoding/binary"
	"sync"

	"github.com/hashicorp/raft-wal/segment"
	"github.com/hashicorp/raft-wal/types"
)

// sealedFiler is raft-wal's segment filer with a reader of its own for
// sealed segments, which a restart reads from end to end: the start-up
// check of every entry's checksum and then hashicorp/raft's replay each
// read every entry once (GetLog per entry). raft-wal's reader answers
// each one with a 4-byte read of the segment's index and a 64 KiB read
// of the frame, whatever the entry's size: for a million entries of
// ~110 bytes that is 4 million system calls copying 128 GB out of the
// page cache, most of a restart's CPU (docs/BENCHMARKS.md, issue 45 item
// 5). sealedReader reads the index once and the frames in windows of
// sealedWindow bytes, and answers an entry as a slice of its window.
//
// Everything else is raft-wal's: which segments the log holds, the tail
// being written, creation and deletion. A sealed segment is never written
// again (raft-wal deletes it whole), so a window read once stays true.
// Whatever sealedReader does not find as expected, in range and well
// formed, or cannot read, it leaves to raft-wal's own reader, whose
// answer (the entry, ErrNotFound, ErrCorrupt, the I/O error) is the one
// raft-wal would have given.
type sealedFiler struct {
	*segment.Filer
	dir string
	vfs types.VFS
}

var _ types.SegmentFiler = (*sealedFiler)(nil)

func newSealedFiler(dir string, vfs types.VFS) *sealedFiler {
	return &sealedFiler{Filer: segment.NewFiler(dir, vfs), dir: dir, vfs: vfs}
}

// Open opens a sealed segment: raft-wal's reader, which checks the file
// header against info, and a file of its own for the windows.
func (f *sealedFiler) Open(info types.SegmentInfo) (types.SegmentReader, error) {
	inner, err := f.Filer.Open(info)
	if err != nil {
		return nil, err
	}
	if info.IndexStart < walFrameHeaderLen || info.MinIndex < info.BaseIndex {
		return inner, nil
	}
	rf, err := f.vfs.OpenReader(f.dir, segment.FileName(info))
	if err != nil {
		return inner, nil // raft-wal's reader opened it; let it answer
	}
	return &sealedReader{info: info, inner: inner, rf: rf}, nil
}

// raft-wal's segment format (raft-wal/segment/format.go): a 32-byte file
// header, then frames of an 8-byte header (type, 3 reserved bytes, a
// little-endian length) and a payload padded to 8 bytes. A sealed
// segment ends with an index frame whose payload, at IndexStart, is the
// 4-byte offset of each entry's frame from BaseIndex on.
const (
	walFileHeaderLen  = 32
	walFrameHeaderLen = 8
	walFrameEntry     = 1
	walFrameIndex     = 2
)

// sealedWindow is how much of a segment one read brings in: about 4,000
// W1 entries for one system call.
const sealedWindow = 512 << 10

// sealedWindows is how many windows a reader keeps: the start-up check
// reads the log in parallel parts, up to one per core, that may fall in
// one segment.
const sealedWindows = 4

type sealedReader struct {
	info  types.SegmentInfo
	inner types.SegmentReader
	rf    types.ReadableFile

	mu      sync.Mutex
	loaded  bool
	offsets []byte // the index frame's payload; nil: answer through inner
	end     uint64 // where the frames end: the index frame's header
	windows [sealedWindows]window
	next    int // the window the next read replaces
}

// window is a part of the segment as read: never written once read, so
// an answer may be a slice of it after the reader has moved on.
type window struct {
	off uint64
	buf []byte
}

func (r *sealedReader) Close() error {
	err := r.rf.Close()
	if ierr := r.inner.Close(); ierr != nil {
		err = ierr
	}
	return err
}

// GetLog answers entry idx's payload, from a window when it can.
func (r *sealedReader) GetLog(idx uint64) (*types.PooledBuffer, error) {
	if b, ok := r.fromWindow(idx); ok {
		return &types.PooledBuffer{Bs: b}, nil
	}
	return r.inner.GetLog(idx)
}

// fromWindow is entry idx's payload out of a window, reading the index
// first and a new window when needed; false: ask raft-wal's reader.
func (r *sealedReader) fromWindow(idx uint64) ([]byte, bool) {
	if idx < r.info.MinIndex || (r.info.MaxIndex > 0 && idx > r.info.MaxIndex) {
		return nil, false
	}
	r.mu.Lock()
	if !r.loaded {
		r.loadIndex()
	}
	i := idx - r.info.BaseIndex
	if r.offsets == nil || i >= uint64(len(r.offsets)/4) {
		r.mu.Unlock()
		return nil, false
	}
	off := uint64(binary.LittleEndian.Uint32(r.offsets[4*i:]))
	limit := r.end // the frame ends before the next one starts
	if n := i + 1; n < uint64(len(r.offsets)/4) {
		limit = uint64(binary.LittleEndian.Uint32(r.offsets[4*n:]))
	}
	if off < walFileHeaderLen || limit > r.end || limit < off+walFrameHeaderLen {
		r.mu.Unlock()
		return nil, false
	}
	var w window
	for _, c := range r.windows {
		if c.buf != nil && c.off <= off && limit <= c.off+uint64(len(c.buf)) {
			w = c
			break
		}
	}
	r.mu.Unlock()
	if w.buf == nil {
		// Read outside the lock: other parts may read other windows.
		size := min(max(sealedWindow, limit-off), r.end-off)
		buf := make([]byte, size)
		if _, err := r.rf.ReadAt(buf, int64(off)); err != nil {
			return nil, false
		}
		w = window{off: off, buf: buf}
		r.mu.Lock()
		r.windows[r.next] = w
		r.next = (r.next + 1) % sealedWindows
		r.mu.Unlock()
	}
	frame := w.buf[off-w.off : limit-w.off]
	n := uint64(binary.LittleEndian.Uint32(frame[4:8]))
	if frame[0] != walFrameEntry || walFrameHeaderLen+n > uint64(len(frame)) {
		return nil, false
	}
	if idx == r.info.MaxIndex {
		// The segment's last entry: a replay is done with it.
		r.mu.Lock()
		r.windows = [sealedWindows]window{}
		r.mu.Unlock()
	}
	return frame[walFrameHeaderLen : walFrameHeaderLen+n], true
}

// loadIndex reads the index frame once; a frame that is not one leaves
// offsets nil, and every read to raft-wal's reader. r.mu is held.
func (r *sealedReader) loadIndex() {
	r.loaded = true
	var h [walFrameHeaderLen]byte
	hdrAt := r.info.IndexStart - walFrameHeaderLen
	if _, err := r.rf.ReadAt(h[:], int64(hdrAt)); err != nil || h[0] != walFrameIndex {
		return
	}
	n := binary.LittleEndian.Uint32(h[4:8])
	if n%4 != 0 || n == 0 {
		return
	}
	offsets := make([]byte, n)
	if _, err := r.rf.ReadAt(offsets, int64(r.info.IndexStart)); err != nil {
		return
	}
	r.offsets, r.end = offsets, hdrAt
}
