// Package binread reads the fields of fencelock's binary encodings — the
// lock table's snapshots, the replicated log's commands, the binary calls
// of a framed connection — from the front of a byte slice: uvarints,
// zigzag varints, single bytes and length-prefixed byte strings.
//
// Every read checks its bounds, so a short or forged input is an error,
// never a panic, and a length read from the input never sizes more than
// the input holds. The first failure sticks: later reads return zero
// values and change nothing, so a decoder reads a whole record and looks
// at Err once.
//
// The errors are bare (no package prefix): each decoder wraps them in its
// own (a corrupt snapshot, a bad command, the field at fault), which is
// what its callers match.
package binread

import (
	"encoding/binary"
	"errors"
	"fmt"
)

var (
	// ErrUvarint: the input ends inside a uvarint, or it overflows 64 bits.
	ErrUvarint = errors.New("bad uvarint")
	// ErrVarint: the input ends inside a varint, or it overflows 64 bits.
	ErrVarint = errors.New("bad varint")
	// ErrTruncated: the input ends before a byte.
	ErrTruncated = errors.New("truncated")
)

// LengthError is a byte string whose length is over its limit or runs past
// the end of the input.
type LengthError struct {
	N uint64 // the length read
}

func (e *LengthError) Error() string { return fmt.Sprintf("string of %d bytes", e.N) }

// Reader reads from the front of a byte slice. The zero Reader has nothing
// to read.
type Reader struct {
	b   []byte
	err error
}

// New returns a Reader of b. It reads b in place: Bytes and Rest return
// parts of b, not copies.
func New(b []byte) Reader { return Reader{b: b} }

// Err is the first failure, nil while every read has succeeded.
func (r *Reader) Err() error { return r.err }

// Fail records err as the reader's failure unless it has one already: a
// decoder's own checks (a value out of range) stick like a short input.
func (r *Reader) Fail(err error) {
	if r.err == nil {
		r.err = err
	}
}

// Len is the number of bytes not read yet.
func (r *Reader) Len() int { return len(r.b) }

// Rest is the bytes not read yet, without reading them.
func (r *Reader) Rest() []byte { return r.b }

// Uvarint reads a uvarint.
func (r *Reader) Uvarint() uint64 {
	v, ok := r.uvarint()
	if !ok {
		r.Fail(ErrUvarint)
	}
	return v
}

// Varint reads a zigzag varint: a uvarint whose lowest bit is the sign,
// as encoding/binary writes it.
func (r *Reader) Varint() int64 {
	ux, ok := r.uvarint()
	if !ok {
		r.Fail(ErrVarint)
		return 0
	}
	x := int64(ux >> 1)
	if ux&1 != 0 {
		x = ^x
	}
	return x
}

// uvarint reads a uvarint, reading nothing and answering false after a
// failure, or when the input ends inside one or it overflows 64 bits.
func (r *Reader) uvarint() (uint64, bool) {
	if r.err != nil {
		return 0, false
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		return 0, false
	}
	r.b = r.b[n:]
	return v, true
}

// Byte reads one byte.
func (r *Reader) Byte() byte {
	if r.err != nil {
		return 0
	}
	if len(r.b) == 0 {
		r.err = ErrTruncated
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

// Bytes reads a byte string of at most limit bytes, its length first as a
// uvarint. The bytes are not copied.
func (r *Reader) Bytes(limit int) []byte {
	n := r.Uvarint()
	if r.err != nil {
		return nil
	}
	if limit < 0 || n > uint64(limit) || n > uint64(len(r.b)) {
		r.err = &LengthError{N: n}
		return nil
	}
	b := r.b[:n:n]
	r.b = r.b[n:]
	return b
}

// String is Bytes as a string, copied out of the input.
func (r *Reader) String(limit int) string { return string(r.Bytes(limit)) }
