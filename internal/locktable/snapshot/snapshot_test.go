package snapshot

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"reflect"
	"slices"
	"testing"
)

var lim = Limits{Key: 64, Holder: 32}

// read is Read into records the test can compare.
func read(data []byte) (Header, []Entry, []Section, error) {
	var h Header
	var got []Entry
	sections, err := Read(data, lim, Restore{
		Header: func(hh Header, n int) error { h = hh; return nil },
		Entry: func(e *Entry) error {
			c := *e
			c.Waiters = slices.Clone(e.Waiters)
			got = append(got, c)
			return nil
		},
	})
	return h, got, sections, err
}

func each(entries []Entry) Entries {
	return Entries{N: len(entries),
		Names: func(yield func(string) bool) {
			for _, e := range entries {
				if e.Held && !yield(e.Lease.Holder) {
					return
				}
				for _, w := range e.Waiters {
					if !yield(w.Holder) {
						return
					}
				}
			}
		},
		Each: func(yield func(*Entry) bool) {
			for i := range entries {
				if !yield(&entries[i]) {
					return
				}
			}
		}}
}

// What Append writes, Read gives back: the header, every entry (leases
// plain and extended, ttls alike and not, queues) and the sections, and
// the version says whether there are sections.
func TestRecordsRoundTrip(t *testing.T) {
	h := Header{Last: 9, MaxNow: 5000}
	entries := []Entry{
		{Key: "jobs/1", Held: true, Lease: Lease{Holder: "a", Token: 3, Granted: 100, Expiry: 1100, TTL: 1000}},
		{Key: "jobs/10", Held: true, Lease: Lease{Holder: "b", Token: 7, Granted: 200, Expiry: 4000, TTL: 1000},
			Waiters: []Waiter{{Holder: "a", TTL: 50, Since: 300, Deadline: 9000}, {Holder: "c", TTL: 60, Since: 301, Deadline: 1 << 62}}},
		{Key: "jobs/2", Waiters: []Waiter{{Holder: "d", TTL: 70, Since: 400, Deadline: 800}}},
		{Key: "z", Held: true, Lease: Lease{Holder: "a", Token: 9, Granted: 4900, Expiry: 7900, TTL: 3000}},
	}
	for _, sections := range [][]Section{nil, {{Tag: 1, Payload: []byte{1, 2}}, {Tag: 3, Payload: []byte("x")}}} {
		b := Append([]byte("prefix"), h, each(entries), sections)
		if !bytes.HasPrefix(b, []byte("prefix")) {
			t.Fatal("dst not kept")
		}
		data := b[len("prefix"):]
		if want := map[bool]string{false: MagicV2, true: MagicV3}[len(sections) > 0]; string(data[:4]) != want {
			t.Fatalf("magic %q, want %q", data[:4], want)
		}
		gh, got, gs, err := read(data)
		if err != nil {
			t.Fatal(err)
		}
		for i := range got {
			if len(got[i].Waiters) == 0 {
				got[i].Waiters = nil
			}
		}
		if gh != h || !reflect.DeepEqual(got, entries) || !reflect.DeepEqual(gs, sections) {
			t.Fatalf("got %+v %+v %+v", gh, got, gs)
		}
	}
}

// Read refuses what the format does not allow, and hands an entry's
// refusal back with its place.
func TestReadRefuses(t *testing.T) {
	entries := []Entry{{Key: "a", Held: true, Lease: Lease{Holder: "h", Token: 1, TTL: 1}}, {Key: "b", Waiters: []Waiter{{Holder: "w", TTL: 1}}}}
	good := Append(nil, Header{Last: 1}, each(entries), nil)
	if _, _, _, err := read(good); err != nil {
		t.Fatal(err)
	}
	flipped := bytes.Clone(good)
	flipped[6] ^= 1
	// as good with another magic, its checksum made again
	as := func(magic string) []byte {
		b := append([]byte(magic), good[4:len(good)-4]...)
		return binary.LittleEndian.AppendUint32(b, crc32.ChecksumIEEE(b))
	}
	for name, data := range map[string][]byte{
		"short":        good[:5],
		"checksum":     flipped,
		"magic":        as("FLT9"),
		"out of order": Append(nil, Header{Last: 1}, each([]Entry{entries[1], entries[0]}), nil),
		"long key":     Append(nil, Header{}, each([]Entry{{Key: string(make([]byte, 65)), Waiters: entries[1].Waiters}}), nil),
		"no sections":  as(MagicV3),
	} {
		if _, _, _, err := read(data); err == nil {
			t.Errorf("%s: read", name)
		}
	}
	refusal := errors.New("no")
	_, err := Read(good, lim, Restore{Header: func(Header, int) error { return nil }, Entry: func(e *Entry) error {
		if e.Key == "b" {
			return refusal
		}
		return nil
	}})
	if !errors.Is(err, refusal) || err.Error() != "entry 1: no" {
		t.Fatalf("%v, want entry 1's refusal", err)
	}
}
