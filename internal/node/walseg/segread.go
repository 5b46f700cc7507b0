package walseg

import (
	"encoding/binary"
	"errors"
	"io"
	"math"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft-wal/segment"
	"github.com/hashicorp/raft-wal/types"
)

// sealedFiler is raft-wal's segment filer with readers of its own, which
// a restart reads from end to end with: the start-up
// check of every entry's checksum and then hashicorp/raft's replay each
// read every entry once (GetLog per entry). raft-wal's reader answers
// each one with a 4-byte read of the segment's index and a 64 KiB read
// of the frame, whatever the entry's size: for a million entries of
// ~110 bytes that is 4 million system calls copying 128 GB out of the
// page cache, most of a restart's CPU (docs/BENCHMARKS.md, issue 45 item
// 5). sealedReader (a sealed segment) and tailWriter (the segment being
// written) read the frames in windows of sealedWindow bytes, and answer
// an entry as a slice of its window.
//
// Everything else is raft-wal's: which segments the log holds, appends,
// sealing, creation and deletion. A sealed segment is never written
// again (raft-wal deletes it whole), nor is a committed frame of the
// tail, so a window read once stays true for them. Whatever the readers
// do not find as expected, in range and well formed, or cannot read, they
// leave to raft-wal's own reader, whose answer (the entry, ErrNotFound,
// ErrCorrupt, the I/O error) is the one raft-wal would have given.
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
	windows windows
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
		return frameBuffer(b), nil
	}
	return r.inner.GetLog(idx)
}

// pooledFrame is a PooledBuffer that answers a frame out of a window,
// kept for reuse: raft-wal closes each buffer a reader answers once it
// has decoded the entry (copying what it keeps), and this one's Close
// puts it back. A new one for each entry read was a restart's second
// largest source of garbage (docs/BENCHMARKS.md, issue 45).
type pooledFrame struct{ types.PooledBuffer }

var pooledFrames sync.Pool

// frameBuffer answers b, a frame's payload in a window.
func frameBuffer(b []byte) *types.PooledBuffer {
	p, _ := pooledFrames.Get().(*pooledFrame)
	if p == nil {
		p = new(pooledFrame)
		p.CloseFn = func() {
			p.Bs = nil // the window is not the pool's to keep
			pooledFrames.Put(p)
		}
	}
	p.Bs = b
	return &p.PooledBuffer
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
	offsets, end := r.offsets, r.end
	r.mu.Unlock()
	i := idx - r.info.BaseIndex
	if offsets == nil || i >= uint64(len(offsets)/4) {
		return nil, false
	}
	off := uint64(binary.LittleEndian.Uint32(offsets[4*i:]))
	limit := end // the frame ends before the next one starts
	if n := i + 1; n < uint64(len(offsets)/4) {
		limit = uint64(binary.LittleEndian.Uint32(offsets[4*n:]))
	}
	if off < walFileHeaderLen || limit > end || limit < off+walFrameHeaderLen {
		return nil, false
	}
	b, ok := r.windows.frame(r.rf, idx, off, limit, end, func() uint64 { return math.MaxUint64 })
	if ok && idx == r.info.MaxIndex {
		r.windows.drop() // the segment's last entry: a replay is done with it
	}
	return b, ok
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

// tailWriter is raft-wal's writer of the segment being appended to, whose
// committed entries it reads through windows like sealedReader. It stays
// the segment's reader once sealed. A committed frame is never written
// again, but the file goes on past it: a window serves only entries
// whose next one was committed before the window was read, so both
// frames were whole in the file when it was.
type tailWriter struct {
	types.SegmentWriter
	offsets interface {
		OffsetForFrame(idx uint64) (uint32, error)
	}
	rf      types.ReadableFile
	windows windows
}

func (f *sealedFiler) tail(info types.SegmentInfo, sw types.SegmentWriter) types.SegmentWriter {
	offsets, ok := sw.(interface {
		OffsetForFrame(idx uint64) (uint32, error)
	})
	if !ok {
		return sw
	}
	rf, err := f.vfs.OpenReader(f.dir, segment.FileName(info))
	if err != nil {
		return sw
	}
	return &tailWriter{SegmentWriter: sw, offsets: offsets, rf: rf}
}

// Create creates a segment: raft-wal's writer, read through windows.
func (f *sealedFiler) Create(info types.SegmentInfo) (types.SegmentWriter, error) {
	sw, err := f.Filer.Create(info)
	if err != nil {
		return nil, err
	}
	return f.tail(info, sw), nil
}

// RecoverTail reopens the segment being written: raft-wal's writer, read
// through windows.
func (f *sealedFiler) RecoverTail(info types.SegmentInfo) (types.SegmentWriter, error) {
	sw, err := f.Filer.RecoverTail(info)
	if err != nil {
		return nil, err
	}
	return f.tail(info, sw), nil
}

func (t *tailWriter) Close() error {
	err := t.rf.Close()
	if werr := t.SegmentWriter.Close(); werr != nil {
		err = werr
	}
	return err
}

// GetLog answers committed entry idx's payload, from a window when it
// can.
func (t *tailWriter) GetLog(idx uint64) (*types.PooledBuffer, error) {
	if idx+1 <= t.LastIndex() {
		off, err1 := t.offsets.OffsetForFrame(idx)
		limit, err2 := t.offsets.OffsetForFrame(idx + 1)
		if err1 == nil && err2 == nil && uint64(off) >= walFileHeaderLen && limit >= off+walFrameHeaderLen {
			if b, ok := t.windows.frame(t.rf, idx, uint64(off), uint64(limit), math.MaxUint64, t.LastIndex); ok {
				return frameBuffer(b), nil
			}
		}
	}
	return t.SegmentWriter.GetLog(idx)
}

// windows are the parts of a segment a reader keeps, up to
// sealedWindows, the oldest replaced first. An entry asked for again
// straight after it was answered (a caller trying again after a bad
// read: the checked log's checksum did not match, say) is left to
// raft-wal's reader, which reads it afresh, and the windows are let go:
// a read that returned a flipped bit that time only must not be answered
// again from memory.
type windows struct {
	mu   sync.Mutex
	ws   [sealedWindows]window
	next int
	last atomic.Uint64 // the entry last asked for, plus one
}

// window is a part of the segment as read: never written once read, so
// an answer may be a slice of it after the reader has moved on. Entries
// below upto were whole in the file when it was read.
type window struct {
	off  uint64
	buf  []byte
	upto uint64
}

// frame is the payload of entry idx, whose frame starts at off and ends
// at or before limit, out of a window that holds it, or one read from
// rf up to end at most (committed is read before, and says up to which
// entry the file then held whole frames); false: not found as expected.
func (w *windows) frame(rf types.ReadableFile, idx, off, limit, end uint64, committed func() uint64) ([]byte, bool) {
	if w.last.Swap(idx+1) == idx+1 {
		w.drop()
		return nil, false
	}
	var win window
	w.mu.Lock()
	for _, c := range w.ws {
		if c.buf != nil && c.off <= off && limit <= c.off+uint64(len(c.buf)) && idx < c.upto {
			win = c
			break
		}
	}
	w.mu.Unlock()
	if win.buf == nil {
		// Read outside the lock: other parts may read other windows.
		upto := committed()
		if idx >= upto {
			return nil, false
		}
		buf := make([]byte, min(max(sealedWindow, limit-off), end-off))
		n, err := rf.ReadAt(buf, int64(off))
		if errors.Is(err, io.EOF) && uint64(n) >= limit-off {
			err, buf = nil, buf[:n] // a tail's file may end before the window
		}
		if err != nil {
			return nil, false
		}
		win = window{off: off, buf: buf, upto: upto}
		w.mu.Lock()
		w.ws[w.next] = win
		w.next = (w.next + 1) % sealedWindows
		w.mu.Unlock()
	}
	frame := win.buf[off-win.off : limit-win.off]
	n := uint64(binary.LittleEndian.Uint32(frame[4:8]))
	if frame[0] != walFrameEntry || walFrameHeaderLen+n > uint64(len(frame)) {
		return nil, false
	}
	return frame[walFrameHeaderLen : walFrameHeaderLen+n], true
}

// drop lets the windows go.
func (w *windows) drop() {
	w.mu.Lock()
	w.ws = [sealedWindows]window{}
	w.mu.Unlock()
}
