package locktable

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/fencelock/fencelock/internal/locktable/snapshot"
)

// randomCalls applies n pseudo-random calls from a fixed seed, so two tables
// given the same (seed, from, n) see the same calls.
func randomCalls(tb *Table, seed uint64, from, n int) {
	r := rand.New(rand.NewPCG(seed, uint64(from)))
	keys := []string{"a", "b", "c", "d"}
	holders := []string{"w", "x", "y", "z"}
	for i := from; i < from+n; i++ {
		now := Time(i) * Time(Second) / 4
		k, h := keys[r.IntN(len(keys))], holders[r.IntN(len(holders))]
		ttl := Duration(1+r.IntN(8)) * Second
		switch r.IntN(6) {
		case 0:
			_, _ = tb.Acquire(k, h, now, ttl)
		case 1:
			_, _, _ = tb.Wait(k, h, now, ttl, now+Time(r.IntN(10))*Time(Second))
		case 2:
			_, _ = tb.Release(k, h, now)
		case 3:
			if l, ok := tb.Get(k, now); ok {
				_, _ = tb.Extend(k, l.Holder, l.Token, now, ttl)
			}
		case 4:
			tb.Tick(now)
		case 5:
			tb.CancelWait(k, h)
		}
	}
}

// Restore then replay gives the same state and the same next token as never
// having snapshotted at all.
func TestRestoreThenReplay(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		orig := New()
		randomCalls(orig, seed, 0, 300)
		snap, err := orig.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		restored := New()
		if _, err := restored.Acquire("junk", "junk", 0, Second); err != nil {
			t.Fatal(err)
		}
		if err := restored.UnmarshalBinary(snap); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		randomCalls(orig, seed, 300, 300)
		randomCalls(restored, seed, 300, 300)
		a, _ := orig.MarshalBinary()
		b, _ := restored.MarshalBinary()
		if !bytes.Equal(a, b) {
			t.Fatalf("seed %d: replay after restore diverged", seed)
		}
		if orig.LastToken() != restored.LastToken() || orig.MaxNow() != restored.MaxNow() {
			t.Fatalf("seed %d: counters diverged", seed)
		}
		la, _ := orig.Acquire("fresh", "f", orig.MaxNow(), Second)
		lb, _ := restored.Acquire("fresh", "f", restored.MaxNow(), Second)
		if la.Token != lb.Token {
			t.Fatalf("seed %d: next token %d vs %d", seed, la.Token, lb.Token)
		}
	}
}

func TestEmptySnapshotRoundTrip(t *testing.T) {
	b, _ := New().MarshalBinary()
	tb := New()
	if err := tb.UnmarshalBinary(b); err != nil || tb.Len() != 0 || tb.LastToken() != 0 {
		t.Fatalf("%v", err)
	}
}

func TestCorruptSnapshotsLeaveTableAlone(t *testing.T) {
	src := New()
	randomCalls(src, 7, 0, 200)
	good, _ := src.MarshalBinary()

	dst := New()
	if _, err := dst.Acquire("mine", "me", 0, Second); err != nil {
		t.Fatal(err)
	}
	before, _ := dst.MarshalBinary()

	flipped := bytes.Clone(good)
	flipped[len(flipped)/2] ^= 0x40
	cases := map[string][]byte{
		"empty":          nil,
		"short":          good[:3],
		"truncated":      good[:len(good)-1],
		"bit flip":       flipped,
		"wrong magic":    append([]byte("XXXX"), good[4:]...),
		"trailing bytes": append(bytes.Clone(good), 0),
	}
	for name, data := range cases {
		err := dst.UnmarshalBinary(data)
		if !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: err %v, want ErrCorrupt", name, err)
		}
		after, _ := dst.MarshalBinary()
		if !bytes.Equal(before, after) {
			t.Errorf("%s: a failed restore changed the table", name)
		}
	}
}

// FuzzUnmarshal: no input panics, and whatever decodes re-encodes to bytes
// that decode to the same table.
func FuzzUnmarshal(f *testing.F) {
	for seed := uint64(0); seed < 4; seed++ {
		tb := New()
		randomCalls(tb, seed, 0, 60)
		b, _ := tb.MarshalBinary()
		f.Add(b, false)
		f.Add(b[:len(b)-4], true)
	}
	f.Add([]byte("FLT1"), true)
	f.Add([]byte("FLT2"), true)
	for seed := uint64(0); seed < 2; seed++ {
		tb := New()
		randomCalls(tb, seed, 0, 60)
		f.Add(encodeV1(tb), false)
	}
	f.Fuzz(func(t *testing.T, data []byte, fixCRC bool) {
		if fixCRC {
			// Reach the decoder behind the checksum.
			data = binary.LittleEndian.AppendUint32(bytes.Clone(data), crc32.ChecksumIEEE(data))
		}
		tb := New()
		if err := tb.UnmarshalBinary(data); err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not match ErrCorrupt", err)
			}
			return
		}
		once, _ := tb.MarshalBinary()
		again := New()
		if err := again.UnmarshalBinary(once); err != nil {
			t.Fatalf("re-encoded snapshot does not decode: %v", err)
		}
		twice, _ := again.MarshalBinary()
		if !bytes.Equal(once, twice) {
			t.Fatal("encoding is not canonical after one round")
		}
		// Whatever was restored must still work as a table.
		tb.Tick(tb.MaxNow())
		_, _ = tb.Acquire("k", "h", tb.MaxNow(), Second)
	})
}

// encodeV1 is the version 1 encoder as it was, to check that snapshots
// written before version 2 still restore.
func encodeV1(t *Table) []byte {
	var keys []string
	for _, e := range indexedEntries(&t.keys) {
		keys = append(keys, e.key)
	}
	slices.Sort(keys)
	b := append([]byte(nil), snapshot.MagicV1...)
	b = binary.AppendUvarint(b, t.last)
	b = binary.AppendVarint(b, int64(t.maxNow))
	b = binary.AppendUvarint(b, uint64(len(keys)))
	for _, k := range keys {
		e := t.keys.get(k)
		b = snapshot.AppendString(b, k)
		if e.held() {
			l := e.lease()
			b = append(b, 1)
			b = snapshot.AppendString(b, l.Holder)
			b = binary.AppendUvarint(b, l.Token)
			b = binary.AppendVarint(b, int64(l.Granted))
			b = binary.AppendVarint(b, int64(l.Expiry))
			b = binary.AppendVarint(b, int64(l.TTL))
		} else {
			b = append(b, 0)
		}
		ws := t.waitersOf(e)
		b = binary.AppendUvarint(b, uint64(len(ws)))
		for _, w := range ws {
			b = snapshot.AppendString(b, w.holder)
			b = binary.AppendVarint(b, int64(w.ttl))
			b = binary.AppendVarint(b, int64(w.since))
			b = binary.AppendVarint(b, int64(w.deadline))
		}
	}
	return binary.LittleEndian.AppendUint32(b, crc32.ChecksumIEEE(b))
}

// A version 1 snapshot restores to the same table as the current encoding.
func TestVersion1SnapshotsStillRestore(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		orig := New()
		randomCalls(orig, seed, 0, 300)
		fromV1 := New()
		if err := fromV1.UnmarshalBinary(encodeV1(orig)); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		a, _ := orig.MarshalBinary()
		b, _ := fromV1.MarshalBinary()
		if !bytes.Equal(a, b) {
			t.Fatalf("seed %d: a version 1 snapshot restored to another table", seed)
		}
		randomCalls(orig, seed, 300, 300)
		randomCalls(fromV1, seed, 300, 300)
		a, _ = orig.MarshalBinary()
		b, _ = fromV1.MarshalBinary()
		if !bytes.Equal(a, b) {
			t.Fatalf("seed %d: replay after a version 1 restore diverged", seed)
		}
	}
}

// The leases the encoding packs (extended ones, varied ttls, waiters,
// shared and unshared key prefixes) come back field for field.
func TestSnapshotKeepsEveryField(t *testing.T) {
	tb := New()
	ttls := []Duration{Second, Second, 3 * Second, Second}
	for i := range 200 {
		key := "jobs/" + strconv.Itoa(i)
		if i%7 == 0 {
			key = strings.Repeat("z", i%13+1) + key
		}
		if _, err := tb.Acquire(key, "h"+strconv.Itoa(i%5), Time(i)*Time(Millisecond), ttls[i%len(ttls)]); err != nil {
			t.Fatal(err)
		}
		if i%3 == 0 {
			l, _ := tb.Get(key, Time(i)*Time(Millisecond))
			if _, err := tb.Extend(key, l.Holder, l.Token, Time(i+50)*Time(Millisecond), 2*Second); err != nil {
				t.Fatal(err)
			}
		}
		if i%11 == 0 {
			_, _, _ = tb.Wait(key, "waiter", Time(i+60)*Time(Millisecond), Second, NoDeadline)
		}
	}
	snap, _ := tb.MarshalBinary()
	back := New()
	if err := back.UnmarshalBinary(snap); err != nil {
		t.Fatal(err)
	}
	now := tb.MaxNow()
	want, got := tb.List("", now, 0), back.List("", now, 0)
	if !slices.Equal(want, got) || len(want) != 200 {
		t.Fatalf("restored %d leases, want %d equal to the original", len(got), len(want))
	}
	for _, l := range want {
		if !slices.Equal(tb.Waiters(l.Key), back.Waiters(l.Key)) {
			t.Fatalf("%s: waiters %v, want %v", l.Key, back.Waiters(l.Key), tb.Waiters(l.Key))
		}
	}
	if back.LastToken() != tb.LastToken() || back.MaxNow() != now {
		t.Fatal("counters differ")
	}
}
