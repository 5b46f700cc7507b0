package framing

import (
	"io"
	"runtime"
	"sync"
)

// batchWriter lets many goroutines write frames to one connection with as
// few system calls as possible, and without a writer goroutine to wake:
// a caller appends its frame and, unless another caller is already
// writing, writes everything pending, again and again while more arrives
// during its write. On loopback a write costs more than building dozens
// of frames, so this is where a busy connection saves most.
type batchWriter struct {
	w io.Writer
	// written, if set, is told of every frame once it has gone to the
	// connection (err nil) or never will (err set): the server holds a
	// request's in-flight slot and counts its answer's bytes until then.
	written func(tags []frameTag, err error)

	mu        sync.Mutex
	buf       []byte     // frames waiting to be written
	tags      []frameTag // one per frame in buf
	spare     []byte     // the last written buffer, for reuse
	spareTags []frameTag
	writing   bool
	err       error // the first write error; every later write fails with it
}

// frameTag describes one queued frame to batchWriter.written.
type frameTag struct {
	size     int  // bytes of the frame
	priority bool // it holds a priority slot
}

// outFrame is one frame for batchWriter: a request (a client's) or an
// answer (the server's). It is a value, so that queueing one allocates
// nothing.
type outFrame struct {
	answer       bool
	id           uint32
	kind, method byte   // a request's
	target       string // a request's
	status       int    // an answer's
	body         []byte
}

// appendTo appends the frame to dst. A request has been checked
// (checkRequest) before it is queued.
func (f *outFrame) appendTo(dst []byte) []byte {
	if f.answer {
		return appendAnswer(dst, f.id, f.status, f.body)
	}
	dst, _ = appendRequest(dst, f.id, f.kind, f.method, f.target, f.body)
	return dst
}

// maxSpare bounds the buffer kept for reuse.
const maxSpare = 256 << 10

// write queues f and makes sure it is written, by this caller or by the
// one writing now. An error means the connection failed; a nil error
// does not promise the peer received anything.
func (b *batchWriter) write(tag frameTag, f outFrame) error {
	b.mu.Lock()
	if b.err != nil {
		err := b.err
		b.mu.Unlock()
		if b.written != nil {
			b.written([]frameTag{tag}, err)
		}
		return err
	}
	b.buf = f.appendTo(b.buf)
	b.tags = append(b.tags, tag)
	if b.writing {
		b.mu.Unlock()
		return nil
	}
	b.writing = true
	// Answers come in bursts (a batch of entries applied at once wakes
	// their callers together): let the others that are ready append
	// theirs before the first write, so that one system call carries
	// the burst rather than its first frame alone.
	b.mu.Unlock()
	runtime.Gosched()
	b.mu.Lock()
	for len(b.buf) > 0 && b.err == nil {
		out, tags := b.buf, b.tags
		b.buf, b.tags = b.spare[:0], b.spareTags[:0]
		b.spare, b.spareTags = nil, nil
		b.mu.Unlock()
		_, err := b.w.Write(out)
		if b.written != nil {
			b.written(tags, err)
		}
		b.mu.Lock()
		if cap(out) <= maxSpare {
			b.spare, b.spareTags = out[:0], tags[:0]
		}
		if err != nil {
			b.err = err
			if b.written != nil && len(b.tags) > 0 {
				// Queued behind the failed write: never to be written.
				left := b.tags
				b.mu.Unlock()
				b.written(left, err)
				b.mu.Lock()
			}
			b.buf, b.tags = nil, nil
		}
	}
	b.writing = false
	err := b.err
	b.mu.Unlock()
	return err
}
