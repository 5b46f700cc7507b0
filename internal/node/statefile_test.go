package node

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

func TestStateFileRoundTripAndTornSlot(t *testing.T) {
	dir := t.TempDir()
	sf, err := openStateFile(OSFS{}, dir, dirState{CRCFrom: 1})
	if err != nil {
		t.Fatal(err)
	}
	for i := range uint64(5) {
		if err := sf.update(func(s *dirState) { s.Ceiling, s.Durable = 1024*(i+1), 10*i }, i%2 == 0); err != nil {
			t.Fatal(err)
		}
	}
	want := dirState{Ceiling: 5 * 1024, Durable: 40, CRCFrom: 1}
	if got := sf.get(); got != want {
		t.Fatalf("in memory %+v, want %+v", got, want)
	}
	if err := sf.close(); err != nil {
		t.Fatal(err)
	}
	if got, err := readStateFile(OSFS{}, dir); err != nil || got != want {
		t.Fatalf("read back %+v %v, want %+v", got, err, want)
	}
	// A torn write of the newest slot leaves the one before it.
	path := filepath.Join(dir, stateFileName)
	b, _ := os.ReadFile(path)
	_, _, slot, _ := parseState(b)
	b[slot*stateSlotLen+20] ^= 0xff
	os.WriteFile(path, b, 0o600)
	got, err := readStateFile(OSFS{}, dir)
	if err != nil || got.Ceiling != 4*1024 || got.Durable != 30 {
		t.Fatalf("after a torn slot: %+v %v", got, err)
	}
	// Both slots bad: an error, never a zero floor taken as real.
	b[(1-slot)*stateSlotLen+20] ^= 0xff
	os.WriteFile(path, b, 0o600)
	if _, err := readStateFile(OSFS{}, dir); err == nil {
		t.Fatal("a file with no valid slot was accepted")
	}
	if _, err := openStateFile(OSFS{}, dir, dirState{}); err == nil {
		t.Fatal("openStateFile accepted a file with no valid slot")
	}
}

func FuzzParseState(f *testing.F) {
	good := make([]byte, stateFileLen)
	copy(good, encodeStateSlot(3, dirState{Ceiling: 2048, Durable: 77, CRCFrom: 1, PendingFloor: 9}))
	copy(good[stateSlotLen:], encodeStateSlot(2, dirState{Ceiling: 1024}))
	f.Add(good)
	f.Add(good[:stateSlotLen])
	f.Add([]byte{})
	f.Add(bytes.Repeat([]byte{0xff}, stateFileLen))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, seq, slot, err := parseState(b)
		if err != nil {
			return
		}
		// What parses is a valid slot that re-encodes to the same bytes,
		// and no valid slot has a higher sequence number.
		if slot < 0 || slot > 1 || !bytes.Equal(encodeStateSlot(seq, s), b[slot*stateSlotLen:(slot+1)*stateSlotLen]) {
			t.Fatalf("parsed %+v seq %d slot %d from bytes that do not encode it", s, seq, slot)
		}
		if q, _, ok := decodeStateSlot(b[(1-slot)*stateSlotLen : (2-slot)*stateSlotLen]); ok && q > seq {
			t.Fatalf("picked seq %d over %d", seq, q)
		}
	})
}
