package locktable

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"

	"github.com/fencelock/fencelock/internal/locktable/snapshot"
)

// TestSharedSnapshotRoundTrip: semaphores and read/write locks with
// holders and waiters come back exactly, beside exclusive keys; once they
// are gone the table is written as version 2 again.
func TestSharedSnapshotRoundTrip(t *testing.T) {
	tb := New()
	sem := Shared{Kind: Semaphore, Permits: 2}
	must := func(_ Lease, _ bool, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tb.Acquire("x", "h", 0, 10*Second); err != nil {
		t.Fatal(err)
	}
	must(tb.AcquireShared("s", "a", sem, 0, 10*Second, 0, WaitLimits{}))
	must(tb.AcquireShared("s", "b", sem, 0, 20*Second, 0, WaitLimits{}))
	must(tb.AcquireShared("s", "c", sem, 0, 10*Second, 5*Time(Second), WaitLimits{}))
	must(tb.AcquireShared("rw", "r", Shared{Kind: ReadWrite}, 0, 10*Second, 0, WaitLimits{}))
	must(tb.AcquireShared("rw", "w", Shared{Kind: ReadWrite, Write: true}, 0, 10*Second, NoDeadline, WaitLimits{}))
	b, err := tb.MarshalBinary()
	if err != nil || string(b[:4]) != snapshot.MagicV3 {
		t.Fatalf("magic %q, %v", b[:4], err)
	}
	back := New()
	if err := back.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	if b2, _ := back.MarshalBinary(); !bytes.Equal(b, b2) {
		t.Fatal("not the same bytes after a round trip")
	}
	for _, k := range []string{"x", "s", "rw"} {
		if got, want := back.Holders(k, 1), tb.Holders(k, 1); len(got) != len(want) || (len(got) > 0 && got[len(got)-1] != want[len(want)-1]) {
			t.Fatalf("%s: %+v, want %+v", k, got, want)
		}
	}
	if back.QueuedCount() != 2 || strings.Join(back.Waiters("rw"), ",") != "w" || back.LastToken() != 4 {
		t.Fatalf("queued %d, waiters %v, last %d", back.QueuedCount(), back.Waiters("rw"), back.LastToken())
	}
	back.Tick(20 * Time(Second)) // everything of the two keys ends
	back.Tick(40 * Time(Second))
	if b, _ := back.MarshalBinary(); string(b[:4]) != snapshot.MagicV2 {
		t.Fatalf("no multi-holder key left, yet magic %q", b[:4])
	}
}

// sharedPayload builds a section 3 payload of one key.
func sharedPayload(key string, kind Kind, permits int, holders [][3]uint64, waiters int) []byte {
	b := binary.AppendUvarint(nil, 1)
	b = snapshot.AppendString(b, key)
	b = append(b, byte(kind))
	b = binary.AppendUvarint(b, uint64(permits))
	b = binary.AppendUvarint(b, uint64(len(holders)))
	for i, h := range holders { // write, slot, token
		b = snapshot.AppendString(b, string(rune('a'+i)))
		b = append(b, byte(h[0]))
		b = binary.AppendUvarint(b, h[1])
		b = binary.AppendUvarint(b, h[2])
		b = binary.AppendVarint(b, 0)
		b = binary.AppendVarint(b, 10)
		b = binary.AppendVarint(b, 10)
	}
	b = binary.AppendUvarint(b, uint64(waiters))
	for i := range waiters {
		b = snapshot.AppendString(b, string(rune('p'+i)))
		b = append(b, 0)
		b = binary.AppendVarint(b, 10)
		b = binary.AppendVarint(b, 0)
		b = binary.AppendVarint(b, 100)
	}
	return b
}

func TestSharedSnapshotRefusesWhatTheTableCannotHold(t *testing.T) {
	ok := sharedPayload("s", Semaphore, 2, [][3]uint64{{0, 1, 1}, {0, 2, 2}}, 1)
	fresh := func() *Table { tb := New(); tb.last = 10; return tb }
	if err := decodeShared(fresh(), ok); err != nil {
		t.Fatalf("a good payload: %v", err)
	}
	for name, p := range map[string][]byte{
		"more holders than permits": sharedPayload("s", Semaphore, 1, [][3]uint64{{0, 1, 1}, {0, 1, 2}}, 0),
		"one slot twice":            sharedPayload("s", Semaphore, 2, [][3]uint64{{0, 1, 1}, {0, 1, 2}}, 0),
		"slot beyond the permits":   sharedPayload("s", Semaphore, 2, [][3]uint64{{0, 3, 1}}, 0),
		"a writer beside a reader":  sharedPayload("s", ReadWrite, 0, [][3]uint64{{1, 0, 1}, {0, 0, 2}}, 0),
		"a writer on a semaphore":   sharedPayload("s", Semaphore, 2, [][3]uint64{{1, 1, 1}}, 0),
		"tokens out of order":       sharedPayload("s", Semaphore, 2, [][3]uint64{{0, 1, 2}, {0, 2, 1}}, 0),
		"a token never issued":      sharedPayload("s", Semaphore, 2, [][3]uint64{{0, 1, 11}}, 0),
		"no holder, no waiter":      sharedPayload("s", Semaphore, 2, nil, 0),
		"permits beyond the limit":  sharedPayload("s", Semaphore, MaxPermits+1, [][3]uint64{{0, 1, 1}}, 0),
		"an exclusive kind":         sharedPayload("s", Exclusive, 0, [][3]uint64{{0, 0, 1}}, 0),
		"trailing bytes":            append(append([]byte{}, ok...), 0),
	} {
		if err := decodeShared(fresh(), p); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
	tb := fresh()
	if _, err := tb.Acquire("s", "h", 0, Second); err != nil {
		t.Fatal(err)
	}
	if err := decodeShared(tb, ok); err == nil {
		t.Error("a key that is also exclusive: decoded")
	}
}
