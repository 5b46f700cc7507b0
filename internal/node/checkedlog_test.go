package node

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"

	"github.com/hashicorp/raft"
)

func TestCheckedEntryRoundTripAndDamage(t *testing.T) {
	orig := &raft.Log{Index: 7, Term: 3, Type: raft.LogCommand, Data: []byte("acquire own/k"), Extensions: []byte("ext")}
	sealed := sealEntry(orig)
	if string(orig.Extensions) != "ext" {
		t.Fatal("sealEntry changed its argument")
	}
	// The checksum of an entry is what data dirs already hold.
	if want := "FLC\x01\xb7\x9c\x88\x84ext"; string(sealed.Extensions) != want {
		t.Fatalf("sealed extensions %q, want %q", sealed.Extensions, want)
	}
	got := *sealed
	if err := openEntry(&got, true); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Extensions, orig.Extensions) || !bytes.Equal(got.Data, orig.Data) {
		t.Fatalf("round trip: %+v", got)
	}
	noExt := *sealEntry(&raft.Log{Index: 1, Term: 1, Data: []byte("x")})
	if err := openEntry(&noExt, true); err != nil || noExt.Extensions != nil {
		t.Fatalf("entry without extensions: %v %q", err, noExt.Extensions)
	}
	damaged := []func(l *raft.Log){
		func(l *raft.Log) { l.Data = append([]byte(nil), l.Data...); l.Data[3] ^= 1 },
		func(l *raft.Log) { l.Index++ },
		func(l *raft.Log) { l.Term++ },
		func(l *raft.Log) { l.Type = raft.LogConfiguration },
		func(l *raft.Log) { l.Data = l.Data[:len(l.Data)-1] },
		func(l *raft.Log) { l.Extensions = append([]byte(nil), l.Extensions...); l.Extensions[5] ^= 1 },
	}
	for i, damage := range damaged {
		l := *sealed
		damage(&l)
		if err := openEntry(&l, true); !errors.Is(err, errEntryCorrupt) {
			t.Errorf("damage %d: %v, want a checksum mismatch", i, err)
		}
	}
	// A legacy entry (no checksum) reads as it is unless one is required.
	legacy := raft.Log{Index: 2, Data: []byte("old"), Extensions: []byte("e")}
	if err := openEntry(&legacy, false); err != nil || string(legacy.Extensions) != "e" {
		t.Fatalf("legacy entry: %v %q", err, legacy.Extensions)
	}
	if err := openEntry(&legacy, true); !errors.Is(err, errEntryCorrupt) {
		t.Fatalf("a required checksum was missing and not reported: %v", err)
	}
}

// The watermark follows appends, and a suffix deletion lowers it first.
func TestCheckedLogWatermark(t *testing.T) {
	dir := t.TempDir()
	sf, err := openStateFile(OSFS{}, dir, dirState{CRCFrom: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer sf.close()
	mem := raft.NewInmemStore()
	cl := &checkedLog{inner: monotonicInmem{mem}, state: sf, crcFrom: 1}
	var logs []*raft.Log
	for i := uint64(1); i <= 10; i++ {
		logs = append(logs, &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: []byte{byte(i)}})
	}
	if err := cl.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
	if d := sf.get().Durable; d != 10 {
		t.Fatalf("watermark %d after 10 entries", d)
	}
	var l raft.Log
	if err := cl.GetLog(4, &l); err != nil || l.Data[0] != 4 || l.Extensions != nil {
		t.Fatalf("GetLog: %+v %v", l, err)
	}
	// The stored entry carries the checksum; damage it in the store.
	var raw raft.Log
	mem.GetLog(5, &raw)
	if len(raw.Extensions) != entryTrailerLen {
		t.Fatalf("stored extensions %q", raw.Extensions)
	}
	raw.Data = []byte{55}
	mem.StoreLog(&raw)
	if err := cl.GetLog(5, &l); !errors.Is(err, errEntryCorrupt) {
		t.Fatalf("damaged entry read: %v", err)
	}
	if err := cl.DeleteRange(1, 3); err != nil || sf.get().Durable != 10 {
		t.Fatalf("head deletion moved the watermark: %v %d", err, sf.get().Durable)
	}
	if err := cl.DeleteRange(8, 10); err != nil || sf.get().Durable != 7 {
		t.Fatalf("suffix deletion: %v watermark %d, want 7", err, sf.get().Durable)
	}
	if b, _ := readStateFile(OSFS{}, dir); b.Durable != 7 {
		t.Fatalf("lowered watermark not on disk: %d", b.Durable)
	}
}

type monotonicInmem struct{ *raft.InmemStore }

func (monotonicInmem) IsMonotonic() bool { return true }

// An entry's checksum is CRC-32C of its index, term, type and data
// length (little-endian), its data and its extensions, as written since
// checksums began; computing it allocates nothing (a restart sums each
// entry three times).
func TestEntrySumFormat(t *testing.T) {
	for _, l := range []*raft.Log{
		{Index: 1, Term: 1, Type: raft.LogCommand, Data: []byte("acquire")},
		{Index: 1<<40 + 7, Term: 1 << 33, Type: raft.LogConfiguration, Data: bytes.Repeat([]byte{0xa5}, 300)},
		{Index: 9, Term: 2, Type: raft.LogNoop},
	} {
		for _, ext := range [][]byte{nil, []byte("ext")} {
			h := binary.LittleEndian.AppendUint64(nil, l.Index)
			h = binary.LittleEndian.AppendUint64(h, l.Term)
			h = append(h, byte(l.Type))
			h = binary.LittleEndian.AppendUint64(h, uint64(len(l.Data)))
			want := crc32.Checksum(append(append(h, l.Data...), ext...), crc32.MakeTable(crc32.Castagnoli))
			if got := entrySum(l, ext); got != want {
				t.Fatalf("entry %d, ext %q: sum %08x, want %08x", l.Index, ext, got, want)
			}
		}
	}
	l := &raft.Log{Index: 5, Term: 3, Type: raft.LogCommand, Data: []byte("data")}
	if n := testing.AllocsPerRun(100, func() { entrySum(l, nil) }); n != 0 {
		t.Fatalf("%v allocations a sum", n)
	}
}
