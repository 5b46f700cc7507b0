package node

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

const tailTestSegSize = 64 << 10

func openTailTestStores(dir string) (*stores, error) {
	return openStores(OSFS{}, dir, EngineHashicorp, tailTestSegSize, hclog.NewNullLogger(), slog.New(slog.DiscardHandler))
}

// writeBatches writes entries 1..n to a new data directory in dir, one
// batch (one fsync) each, and leaves the state file's watermark at
// watermark, as if its last checkpoint had been then.
func writeBatches(t *testing.T, dir string, n, watermark uint64) {
	t.Helper()
	st, err := openTailTestStores(dir)
	if err != nil {
		t.Fatal(err)
	}
	for i := uint64(1); i <= n; i++ {
		if err := st.logs.StoreLogs([]*raft.Log{{Index: i, Term: 1, Data: fmt.Appendf(nil, "grant %d", i)}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.close(); err != nil {
		t.Fatal(err)
	}
	if err := EditStateFile(dir, func(s *StateRecord) { s.Durable = watermark }); err != nil {
		t.Fatal(err)
	}
}

// entryFrame is the offset of entry index's frame in the last segment.
func entryFrame(t *testing.T, path string, index uint64) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var base uint64
	fmt.Sscanf(filepath.Base(path), "%020d-", &base)
	for off := segFileHeaderLen; off+segFrameHeaderLen <= len(b); {
		n := 0
		switch b[off] {
		case segFrameEntry:
			if base == index {
				return off
			}
			base++
			n = int(binary.LittleEndian.Uint32(b[off+4:]))
		case segFrameIndex:
			n = int(binary.LittleEndian.Uint32(b[off+4:]))
		case segFrameCommit:
		default:
			t.Fatalf("no frame of entry %d in %s", index, path)
		}
		off += frameSize(n)
	}
	t.Fatalf("no frame of entry %d in %s", index, path)
	return 0
}

func flipBit(t *testing.T, path string, at int, bit uint) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[at] ^= 1 << bit
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func tailSegment(t *testing.T, dir string) string {
	t.Helper()
	p, err := lastSegment(OSFS{}, filepath.Join(dir, "wal"))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Entries 1..8, each in a batch of its own and synced, the state file's
// watermark at 2 (its last checkpoint); then a bit of entry 5's frame
// header rots. raft-wal took the unreadable frame for a torn write and
// dropped entries 5..8 without a word, though entries 6..8 read back
// whole after it: the node started without four synced entries. It is
// refused now, naming the range.
func TestSyncedEntriesDamagedAfterTheWatermarkRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		bit  uint
		off  int // within the frame header
	}{
		{"type", 2, 0}, // entry (1) reads as type 5, unknown
		{"length", 4, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeBatches(t, dir, 8, 2)
			seg := tailSegment(t, dir)
			flipBit(t, seg, entryFrame(t, seg, 5)+tc.off, tc.bit)
			st, err := openTailTestStores(dir)
			if err == nil {
				last, _ := st.logs.LastIndex()
				st.close()
				t.Fatalf("started with the log ending at %d: entries 5..8 were synced and are gone", last)
			}
			var de *DataDirError
			if !errors.As(err, &de) || !strings.Contains(err.Error(), "entries 5..8") ||
				!strings.Contains(err.Error(), dir) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("refusal %q, want one line naming %s and entries 5..8", err, dir)
			}
		})
	}
}

// Damage in the last batch is what a torn write looks like: nothing
// after it, nothing that says it was synced. Below the watermark it is
// refused; above it the node starts without it (RELIABILITY.md: the
// etcd engine's hard state covers what it committed).
func TestLastBatchDamagedIsATornTailUnlessTheWatermarkCoversIt(t *testing.T) {
	for _, watermark := range []uint64{7, 8} {
		t.Run(fmt.Sprint(watermark), func(t *testing.T) {
			dir := t.TempDir()
			writeBatches(t, dir, 8, watermark)
			seg := tailSegment(t, dir)
			flipBit(t, seg, entryFrame(t, seg, 8)+segFrameHeaderLen+2, 1)
			st, err := openTailTestStores(dir)
			if watermark == 8 {
				var de *DataDirError
				if !errors.As(err, &de) {
					if st != nil {
						st.close()
					}
					t.Fatalf("err %v, want a refusal: entry 8 was below the watermark", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer st.close()
			if last, _ := st.logs.LastIndex(); last != 7 {
				t.Fatalf("last index %d, want 7", last)
			}
		})
	}
}

// plainFS is the operating system's files, but not OSFS: raft-wal runs
// over walVFS and keeps its metadata in walMeta's file, which a test can
// edit.
type plainFS struct{ OSFS }

// The write that sealed the last segment was torn by a power loss before
// it was synced (its commit frame does not match), and raft-wal's
// rotation had not recorded the seal: raft-wal's recovery drops the
// batch but still takes the segment for sealed, so every append fails,
// and the node halted at every restart. Now the torn write is cut off
// when nothing says it was synced, and refused when the watermark does.
func TestTornSealingWriteCutOrRefused(t *testing.T) {
	for _, watermark := range []uint64{1, 0} { // 0: the sealing batch's last entry
		t.Run(fmt.Sprint(watermark), func(t *testing.T) {
			dir := t.TempDir()
			open := func() (*stores, error) {
				return openStores(plainFS{}, dir, EngineHashicorp, 8<<10, hclog.NewNullLogger(), slog.New(slog.DiscardHandler))
			}
			st, err := open()
			if err != nil {
				t.Fatal(err)
			}
			walDir := filepath.Join(dir, "wal")
			var n uint64
			for n = 1; ; n++ {
				if err := st.logs.StoreLogs([]*raft.Log{{Index: n, Term: 1, Data: fmt.Appendf(nil, "grant %d", n)}}); err != nil {
					t.Fatal(err)
				}
				if segs, _ := walFiles(OSFS{}, walDir); len(segs) == 2 {
					break
				}
				if n > 10000 {
					t.Fatal("no rotation")
				}
			}
			if err := st.close(); err != nil {
				t.Fatal(err)
			}
			if watermark == 0 {
				watermark = n
			}
			if err := EditStateFile(dir, func(s *StateRecord) { s.Durable = watermark }); err != nil {
				t.Fatal(err)
			}
			// The power loss came before the rotation's metadata: the
			// sealed segment is the last one, recorded as open.
			m := &walMeta{fsys: OSFS{}}
			if _, err := m.Load(walDir); err != nil {
				t.Fatal(err)
			}
			rec := m.rec
			rec.State.Segments = rec.State.Segments[:1]
			rec.State.Segments[0].SealTime, rec.State.Segments[0].MaxIndex, rec.State.Segments[0].IndexStart = time.Time{}, 0, 0
			if err := m.writeLocked(rec); err != nil {
				t.Fatal(err)
			}
			segs, _ := walFiles(OSFS{}, walDir)
			seg := filepath.Join(walDir, segs[0])
			b, err := os.ReadFile(seg)
			if err != nil {
				t.Fatal(err)
			}
			// The last commit frame: the one after the index frame.
			idx := 0
			for off := segFileHeaderLen; off+segFrameHeaderLen <= len(b) && b[off] != 0; {
				n := 0
				if b[off] != segFrameCommit {
					n = int(binary.LittleEndian.Uint32(b[off+4:]))
				}
				if b[off] == segFrameIndex {
					idx = off
				}
				off += frameSize(n)
			}
			if idx == 0 {
				t.Fatal("no index frame: the segment was not sealed")
			}
			flipBit(t, seg, idx+frameSize(int(binary.LittleEndian.Uint32(b[idx+4:])))+5, 3)

			st, err = open()
			if watermark == n {
				var de *DataDirError
				if !errors.As(err, &de) {
					if st != nil {
						st.close()
					}
					t.Fatalf("err %v, want a refusal: the watermark covers the sealing write", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer st.close()
			last, _ := st.logs.LastIndex()
			if last >= n {
				t.Fatalf("last index %d: the torn batch (ending at %d) was kept", last, n)
			}
			if err := st.logs.StoreLogs([]*raft.Log{{Index: last + 1, Term: 1, Data: []byte("again")}}); err != nil {
				t.Fatalf("appending after the torn sealing write: %v", err)
			}
		})
	}
}

// `fencelock recover` cuts the damaged writes off the last segment (the
// start refused them), keeps a copy, and the node starts again without
// them.
func TestRecoverCutsADamagedTail(t *testing.T) {
	dir := t.TempDir()
	writeBatches(t, dir, 8, 2)
	seg := tailSegment(t, dir)
	flipBit(t, seg, entryFrame(t, seg, 5), 2)
	if _, err := openTailTestStores(dir); err == nil {
		t.Fatal("started on the damaged log")
	}
	did, err := Recover(dir, RecoverOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(did, "\n"), "entries 5 to 8") {
		t.Errorf("recover said %q, want entries 5 to 8 named", did)
	}
	st, err := openTailTestStores(dir)
	if err != nil {
		t.Fatalf("after recover: %v", err)
	}
	defer st.close()
	if last, _ := st.logs.LastIndex(); last != 4 {
		t.Fatalf("last index %d after recover, want 4", last)
	}
}

// flipFS flips a bit of the last segment each time it is read whole.
type flipFS struct {
	plainFS
	at int
}

func (f flipFS) ReadFile(path string) ([]byte, error) {
	b, err := f.plainFS.ReadFile(path)
	if err == nil && strings.HasSuffix(path, ".wal") && f.at < len(b) {
		b[f.at] ^= 1
	}
	return b, err
}

// A last segment that reads back differently on two reads (one of them
// flipped a bit of the last batch) is refused rather than cut short: what
// is on the disk read back whole once.
func TestTailReadBackDifferentlyRefused(t *testing.T) {
	dir := t.TempDir()
	open := func(fsys FS) (*stores, error) {
		return openStores(fsys, dir, EngineHashicorp, tailTestSegSize, hclog.NewNullLogger(), slog.New(slog.DiscardHandler))
	}
	st, err := open(plainFS{})
	if err != nil {
		t.Fatal(err)
	}
	for i := uint64(1); i <= 3; i++ {
		if err := st.logs.StoreLogs([]*raft.Log{{Index: i, Term: 1, Data: []byte("grant")}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.close(); err != nil {
		t.Fatal(err)
	}
	seg := tailSegment(t, dir)
	_, err = open(flipFS{at: entryFrame(t, seg, 3) + segFrameHeaderLen + 1})
	var de *DataDirError
	if !errors.As(err, &de) || !strings.Contains(err.Error(), "read back differently") {
		t.Fatalf("err %v, want a refusal: the segment read back differently", err)
	}
	st, err = open(plainFS{})
	if err != nil {
		t.Fatalf("read back whole: %v", err)
	}
	defer st.close()
	if last, _ := st.logs.LastIndex(); last != 3 {
		t.Fatalf("last index %d, want 3", last)
	}
}
