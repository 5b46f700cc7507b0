package binread

import (
	"encoding/binary"
	"errors"
	"math"
	"testing"
)

func TestReadsInOrder(t *testing.T) {
	b := binary.AppendUvarint(nil, 300)
	b = binary.AppendVarint(b, -7)
	b = append(b, 9)
	b = binary.AppendUvarint(b, 3)
	b = append(b, "abc"...)
	b = binary.AppendUvarint(b, 2)
	b = append(b, "de"...)
	b = append(b, 0xff)
	r := New(b)
	if v := r.Uvarint(); v != 300 {
		t.Fatalf("uvarint %d", v)
	}
	if v := r.Varint(); v != -7 {
		t.Fatalf("varint %d", v)
	}
	if v := r.Byte(); v != 9 {
		t.Fatalf("byte %d", v)
	}
	if s := r.String(3); s != "abc" {
		t.Fatalf("string %q", s)
	}
	if p := r.Bytes(2); string(p) != "de" || cap(p) != 2 {
		t.Fatalf("bytes %q cap %d: appending to them must not write over the input", p, cap(p))
	}
	if r.Len() != 1 || r.Rest()[0] != 0xff || r.Err() != nil {
		t.Fatalf("left %d %v, err %v", r.Len(), r.Rest(), r.Err())
	}
}

// Each failure is typed, sticks, and leaves what is left unread.
func TestFailuresStick(t *testing.T) {
	long := binary.AppendUvarint(nil, 5)
	long = append(long, "abc"...)
	cases := []struct {
		name string
		in   []byte
		read func(r *Reader)
		want error
	}{
		{"empty uvarint", nil, func(r *Reader) { r.Uvarint() }, ErrUvarint},
		{"cut uvarint", []byte{0x80}, func(r *Reader) { r.Uvarint() }, ErrUvarint},
		{"overflowing uvarint", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, func(r *Reader) { r.Uvarint() }, ErrUvarint},
		{"cut varint", []byte{0x80}, func(r *Reader) { r.Varint() }, ErrVarint},
		{"empty byte", nil, func(r *Reader) { r.Byte() }, ErrTruncated},
		{"string past the end", long, func(r *Reader) { r.String(10) }, &LengthError{N: 5}},
		{"string over its limit", []byte{2, 'a', 'b'}, func(r *Reader) { r.Bytes(1) }, &LengthError{N: 2}},
		{"negative limit", []byte{0}, func(r *Reader) { r.Bytes(-1) }, &LengthError{N: 0}},
		{"string without a length", nil, func(r *Reader) { r.Bytes(1) }, ErrUvarint},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := New(c.in)
			c.read(&r)
			err := r.Err()
			var le, wantLE *LengthError
			if errors.As(c.want, &wantLE) {
				if !errors.As(err, &le) || le.N != wantLE.N || err.Error() != wantLE.Error() {
					t.Fatalf("err %v, want %v", err, c.want)
				}
			} else if !errors.Is(err, c.want) {
				t.Fatalf("err %v, want %v", err, c.want)
			}
			left := r.Len()
			if r.Uvarint() != 0 || r.Varint() != 0 || r.Byte() != 0 || r.Bytes(math.MaxInt) != nil || r.Len() != left || r.Err() != err {
				t.Fatal("a read after a failure read on")
			}
			r.Fail(errors.New("later"))
			if r.Err() != err {
				t.Fatal("Fail replaced the first failure")
			}
		})
	}
	r := New([]byte{1})
	r.Fail(errors.New("out of range"))
	if r.Byte() != 0 || r.Len() != 1 {
		t.Fatal("a decoder's own failure did not stick")
	}
}

// FuzzReader reads any input with any sequence of reads: never a panic,
// never more bytes than the input, and a failure always sticks.
func FuzzReader(f *testing.F) {
	f.Add([]byte{1, 2, 3}, []byte{0, 1, 2, 3})
	f.Add([]byte{0x80, 0x80}, []byte{3, 3})
	f.Fuzz(func(t *testing.T, in, ops []byte) {
		r := New(in)
		for _, op := range ops {
			before, failed := r.Len(), r.Err() != nil
			switch op % 5 {
			case 0:
				r.Uvarint()
			case 1:
				r.Varint()
			case 2:
				r.Byte()
			case 3:
				if p := r.Bytes(int(op)); len(p) > before {
					t.Fatalf("read %d bytes of %d", len(p), before)
				}
			case 4:
				_ = r.String(math.MaxInt)
			}
			if r.Len() > before || (failed && r.Len() != before) || (failed && r.Err() == nil) {
				t.Fatalf("after op %d: %d bytes left of %d, failed %v, err %v", op, r.Len(), before, failed, r.Err())
			}
		}
	})
}

// Varint reads exactly what encoding/binary writes, at the edges too.
func TestVarintMatchesEncodingBinary(t *testing.T) {
	for _, v := range []int64{0, 1, -1, 63, -64, 64, -65, math.MaxInt64, math.MinInt64, math.MaxInt32, math.MinInt32} {
		r := New(binary.AppendVarint(nil, v))
		if got := r.Varint(); got != v || r.Err() != nil || r.Len() != 0 {
			t.Errorf("varint %d: read %d, err %v, %d left", v, got, r.Err(), r.Len())
		}
	}
}

// FuzzVarint: on any input Varint answers what binary.Varint does, and
// fails exactly where it does.
func FuzzVarint(f *testing.F) {
	f.Add([]byte{0x80})
	f.Add(binary.AppendVarint(nil, math.MinInt64))
	f.Fuzz(func(t *testing.T, in []byte) {
		want, n := binary.Varint(in)
		r := New(in)
		got := r.Varint()
		if (n <= 0) != (r.Err() != nil) || (n > 0 && (got != want || r.Len() != len(in)-n)) {
			t.Fatalf("%x: read %d err %v left %d, binary.Varint %d %d", in, got, r.Err(), r.Len(), want, n)
		}
	})
}
