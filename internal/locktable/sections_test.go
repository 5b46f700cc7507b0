package locktable

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"

	"github.com/fencelock/fencelock/internal/locktable/snapshot"
)

// A section kind registered by the test alone: the table's last token as
// its payload, so that a round trip shows the payload came back.
func withTestSection(t *testing.T, got *[]byte) {
	old := sections
	sections = append([]section{}, old...)
	sections = append(sections, section{tag: 200,
		encode: func(t *Table, b []byte) []byte {
			if t.last < 2 {
				return b
			}
			return binary.AppendUvarint(b, t.last)
		},
		decode: func(_ *Table, p []byte) error {
			*got = append([]byte{}, p...)
			return nil
		}})
	t.Cleanup(func() { sections = old })
}

func TestSectionsRoundTripAndVersion(t *testing.T) {
	var got []byte
	withTestSection(t, &got)
	tb := New()
	if _, err := tb.Acquire("a", "h", 0, Second); err != nil {
		t.Fatal(err)
	}
	b, _ := tb.MarshalBinary()
	if string(b[:4]) != snapshot.MagicV2 {
		t.Fatalf("no section state: magic %q, want %q", b[:4], snapshot.MagicV2)
	}
	if _, err := tb.Acquire("b", "h", 0, Second); err != nil {
		t.Fatal(err)
	}
	b, _ = tb.MarshalBinary()
	if string(b[:4]) != snapshot.MagicV3 {
		t.Fatalf("with section state: magic %q, want %q", b[:4], snapshot.MagicV3)
	}
	var back Table
	if err := back.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	if want := binary.AppendUvarint(nil, 2); !bytes.Equal(got, want) {
		t.Fatalf("section payload %x, want %x", got, want)
	}
	if back.Len() != 2 || back.LastToken() != 2 {
		t.Fatalf("entries %d, last %d", back.Len(), back.LastToken())
	}
}

func TestSectionsCorrupt(t *testing.T) {
	var got []byte
	withTestSection(t, &got)
	tb := New()
	tb.Acquire("a", "h", 0, Second)
	plain, _ := tb.MarshalBinary()
	body := plain[:len(plain)-4]
	reseal := func(b []byte) []byte { return binary.LittleEndian.AppendUint32(b, crc32.ChecksumIEEE(b)) }
	v3 := func(tail ...byte) []byte {
		b := append([]byte(snapshot.MagicV3), body[4:]...)
		return reseal(append(b, tail...))
	}
	for name, data := range map[string][]byte{
		"v3 without sections": v3(),
		"unknown tag":         v3(7, 1, 0),
		"empty payload":       v3(200, 0),
		"tag twice":           v3(200, 1, 5, 200, 1, 5),
		"short payload":       v3(200, 3, 5),
	} {
		var back Table
		if err := back.UnmarshalBinary(data); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", name, err)
		}
	}
	var back Table
	if err := back.UnmarshalBinary(v3(200, 1, 5)); err != nil || !bytes.Equal(got, []byte{5}) {
		t.Fatalf("one good section: %v, payload %x", err, got)
	}
}
