package framing

import (
	"io"
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

	mu      sync.Mutex
	buf     []byte // frames waiting to be written
	spare   []byte // the last written buffer, for reuse
	writing bool
	err     error // the first write error; every later write fails with it
}

// maxSpare bounds the buffer kept for reuse.
const maxSpare = 256 << 10

// write appends a frame with add and makes sure it is written, by this
// caller or by the one writing now. An error means the connection failed;
// a nil error does not promise the peer received anything.
func (b *batchWriter) write(add func([]byte) []byte) error {
	b.mu.Lock()
	if b.err != nil {
		err := b.err
		b.mu.Unlock()
		return err
	}
	b.buf = add(b.buf)
	if b.writing {
		b.mu.Unlock()
		return nil
	}
	b.writing = true
	for len(b.buf) > 0 && b.err == nil {
		out := b.buf
		b.buf = b.spare[:0]
		b.spare = nil
		b.mu.Unlock()
		_, err := b.w.Write(out)
		b.mu.Lock()
		if cap(out) <= maxSpare {
			b.spare = out[:0]
		}
		if err != nil {
			b.err = err
			b.buf = nil
		}
	}
	b.writing = false
	err := b.err
	b.mu.Unlock()
	return err
}
