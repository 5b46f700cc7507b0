package walseg

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync/atomic"
	"testing"

	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
	walfs "github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/types"
)

// fillWAL writes n entries to a WAL in dir, in batches of batch, with
// small segments so that most of them are sealed; entry i's data is
// dataOf(i).
func fillWAL(t testing.TB, dir string, n, batch int) {
	t.Helper()
	w, err := wal.Open(dir, wal.WithSegmentSize(64<<10))
	if err != nil {
		t.Fatal(err)
	}
	var logs []*raft.Log
	for i := 1; i <= n; i++ {
		logs = append(logs, &raft.Log{Index: uint64(i), Term: 1, Type: raft.LogCommand, Data: dataOf(i)})
		if len(logs) == batch || i == n {
			if err := w.StoreLogs(logs); err != nil {
				t.Fatal(err)
			}
			logs = logs[:0]
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// dataOf is entry i's data: sizes from 1 byte to past a frame's padding
// and, every 97th, past a window.
func dataOf(i int) []byte {
	n := 1 + i%200
	if i%97 == 0 {
		n = sealedWindow + i%13
	}
	return bytes.Repeat([]byte{byte(i)}, n)
}

func openWithFiler(t testing.TB, dir string, sf types.SegmentFiler) *wal.WAL {
	t.Helper()
	var w *wal.WAL
	var err error
	if sf == nil {
		w, err = wal.Open(dir, wal.WithSegmentSize(64<<10))
	} else {
		w, err = wal.Open(dir, wal.WithSegmentSize(64<<10), wal.WithSegmentFiler(sf))
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

// The sealed reader answers every entry as raft-wal's own reader does,
// read in order, backwards and after the log's head and tail were cut.
func TestSealedReaderAnswersAsRaftWAL(t *testing.T) {
	dir := t.TempDir()
	const n = 3000
	fillWAL(t, dir, n, 7)
	if segs, _ := filepath.Glob(filepath.Join(dir, "*.wal")); len(segs) < 4 {
		t.Fatalf("%d segments: want several sealed ones", len(segs))
	}
	vfs := &countingVFS{VFS: walfs.New()}
	ours := openWithFiler(t, dir, newSealedFiler(dir, vfs))
	check := func(what string, order []uint64) {
		t.Helper()
		for _, i := range order {
			var got raft.Log
			if err := ours.GetLog(i, &got); err != nil {
				t.Fatalf("%s: entry %d: %v", what, i, err)
			}
			if got.Index != i || !bytes.Equal(got.Data, dataOf(int(i))) {
				t.Fatalf("%s: entry %d read as index %d, %d bytes", what, i, got.Index, len(got.Data))
			}
		}
	}
	var order []uint64
	for i := uint64(1); i <= n; i++ {
		order = append(order, i)
	}
	check("forward", order)
	// raft-wal's reader makes two reads an entry; the windows, a few a
	// segment (and one for each entry bigger than a window).
	if reads := vfs.reads.Load(); reads > n/10 {
		t.Errorf("%d reads for %d entries: not read through the windows", reads, n)
	}
	sort.Slice(order, func(a, b int) bool { return order[a] > order[b] })
	check("backward", order)

	// Cut the head (MinIndex rises in a sealed segment) and the tail (the
	// segment holding it is force-sealed short).
	if err := ours.DeleteRange(1, 1500); err != nil {
		t.Fatal(err)
	}
	if err := ours.DeleteRange(2500, n); err != nil {
		t.Fatal(err)
	}
	for _, i := range []uint64{1, 1500, 2500, n} {
		var l raft.Log
		if err := ours.GetLog(i, &l); !errors.Is(err, wal.ErrNotFound) {
			t.Errorf("entry %d after the cuts: %v, want ErrNotFound", i, err)
		}
	}
	check("after the cuts", order[n-2499+1:n-1500])
}

// The tail is read while it grows: a window read before entries were
// appended does not answer them.
func TestTailReaderReadsWhatWasAppendedAfterAWindow(t *testing.T) {
	dir := t.TempDir()
	w := openWithFiler(t, dir, newSealedFiler(dir, walfs.New()))
	appendRange := func(from, to int) {
		t.Helper()
		var logs []*raft.Log
		for i := from; i <= to; i++ {
			logs = append(logs, &raft.Log{Index: uint64(i), Term: 1, Data: dataOf(i)})
		}
		if err := w.StoreLogs(logs); err != nil {
			t.Fatal(err)
		}
	}
	read := func(from, to int) {
		t.Helper()
		for i := from; i <= to; i++ {
			var l raft.Log
			if err := w.GetLog(uint64(i), &l); err != nil || !bytes.Equal(l.Data, dataOf(i)) {
				t.Fatalf("entry %d: %v, %d bytes", i, err, len(l.Data))
			}
		}
	}
	appendRange(1, 10)
	// What a torn write may leave past the last commit: a frame as entry
	// 11's, with other data, where entry 11 will be written.
	segs, _ := filepath.Glob(filepath.Join(dir, "*.wal"))
	f, err := os.OpenFile(segs[0], os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	at := int64(walFileHeaderLen)
	for {
		var h [walFrameHeaderLen]byte
		if _, err := f.ReadAt(h[:], at); err != nil {
			t.Fatal(err)
		}
		if h[0] == 0 {
			break
		}
		at += walFrameHeaderLen
		if h[0] == walFrameEntry {
			at += int64(binary.LittleEndian.Uint32(h[4:])+7) &^ 7
		}
	}
	stale := make([]byte, walFrameHeaderLen+len(dataOf(11)))
	stale[0] = walFrameEntry
	binary.LittleEndian.PutUint32(stale[4:], uint32(len(dataOf(11))))
	copy(stale[walFrameHeaderLen:], bytes.Repeat([]byte{'X'}, len(dataOf(11))))
	if _, err := f.WriteAt(stale, at); err != nil {
		t.Fatal(err)
	}
	read(1, 10) // reads a window past entry 10, over the stale frame
	appendRange(11, 20)
	read(1, 20)
	appendRange(21, 40)
	read(15, 40)
}

// A damaged frame in a sealed segment is left to raft-wal's reader,
// whose error is the answer.
func TestSealedReaderLeavesDamageToRaftWAL(t *testing.T) {
	dir := t.TempDir()
	fillWAL(t, dir, 400, 1)
	segs, _ := filepath.Glob(filepath.Join(dir, "*.wal"))
	sort.Strings(segs)
	raw, err := os.ReadFile(segs[0])
	if err != nil {
		t.Fatal(err)
	}
	raw[walFrameBytes(raw, 2)] = 9
	if err := os.WriteFile(segs[0], raw, 0o644); err != nil {
		t.Fatal(err)
	}
	theirs := openWithFiler(t, dir, nil)
	var l raft.Log
	want := theirs.GetLog(2, &l)
	if want == nil {
		t.Fatal("raft-wal read the damaged entry")
	}
	theirs.Close()
	ours := openWithFiler(t, dir, newSealedFiler(dir, walfs.New()))
	got := ours.GetLog(2, &l)
	if got == nil || got.Error() != want.Error() {
		t.Fatalf("damaged entry: %v, want raft-wal's %v", got, want)
	}
	if err := ours.GetLog(3, &l); err != nil || !bytes.Equal(l.Data, dataOf(3)) {
		t.Fatalf("entry 3 after the damaged one: %v", err)
	}
}

// walFrameBytes is the offset of the k-th entry frame (from 1) in a segment
// file's bytes (commit frames carry a CRC, not a length).
func walFrameBytes(raw []byte, k int) int {
	at, entries := walFileHeaderLen, 0
	for {
		typ, n := raw[at], int(binary.LittleEndian.Uint32(raw[at+4:]))
		if typ == walFrameEntry {
			if entries++; entries == k {
				return at
			}
			at += walFrameHeaderLen + (n+7)&^7
		} else {
			at += walFrameHeaderLen
		}
	}
}

// An entry asked for again straight after is read afresh: what a window
// holds of it (here, bytes the file no longer has; in a bad read, a
// flipped bit) is not answered twice.
func TestSealedReaderReadsAnEntryAskedAgainAfresh(t *testing.T) {
	dir := t.TempDir()
	fillWAL(t, dir, 400, 1)
	segs, _ := filepath.Glob(filepath.Join(dir, "*.wal"))
	sort.Strings(segs)
	w := openWithFiler(t, dir, newSealedFiler(dir, walfs.New()))
	var l raft.Log
	if err := w.GetLog(5, &l); err != nil || !bytes.Equal(l.Data, dataOf(5)) {
		t.Fatalf("entry 5: %v", err)
	}
	raw, err := os.ReadFile(segs[0])
	if err != nil {
		t.Fatal(err)
	}
	at := walFrameBytes(raw, 5) + walFrameHeaderLen
	payload := raw[at : at+int(binary.LittleEndian.Uint32(raw[at-4:]))]
	i := bytes.Index(payload, dataOf(5))
	if i < 0 {
		t.Fatal("entry 5's data is not in its frame")
	}
	f, err := os.OpenFile(segs[0], os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt([]byte{0xff}, int64(at+i)); err != nil {
		t.Fatal(err)
	}
	if err := w.GetLog(5, &l); err != nil || l.Data[0] != 0xff {
		t.Fatalf("entry 5 asked again: %v, data %x: not read afresh", err, l.Data)
	}
	if err := w.GetLog(6, &l); err != nil || !bytes.Equal(l.Data, dataOf(6)) {
		t.Fatalf("entry 6: %v", err)
	}
}

// BenchmarkReplayRead reads a sealed log of 100,000 entries of W4's size
// (~90 bytes) from end to end, as a restart's check and replay do, through
// raft-wal's readers and through sealedFiler's windows.
func BenchmarkReplayRead(b *testing.B) {
	dir := b.TempDir()
	const n = 100_000
	w, err := wal.Open(dir, wal.WithSegmentSize(1<<20))
	if err != nil {
		b.Fatal(err)
	}
	var logs []*raft.Log
	for i := 1; i <= n; i++ {
		logs = append(logs, &raft.Log{Index: uint64(i), Term: 1, Data: fmt.Appendf(nil, "%090d", i)})
		if len(logs) == 64 {
			if err := w.StoreLogs(logs); err != nil {
				b.Fatal(err)
			}
			logs = logs[:0]
		}
	}
	if err := w.StoreLogs(logs); err != nil {
		b.Fatal(err)
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		sf   func() types.SegmentFiler
	}{
		{"raftwal", func() types.SegmentFiler { return nil }},
		{"windows", func() types.SegmentFiler { return newSealedFiler(dir, walfs.New()) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				w := openWithFiler(b, dir, c.sf())
				last, _ := w.LastIndex()
				var l raft.Log
				for i := uint64(1); i <= last; i++ {
					if err := w.GetLog(i, &l); err != nil {
						b.Fatal(err)
					}
				}
				w.Close()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/entry")
		})
	}
}

// countingVFS counts the reads of the files it opens for reading.
type countingVFS struct {
	types.VFS
	reads atomic.Int64
}

func (v *countingVFS) OpenReader(dir, name string) (types.ReadableFile, error) {
	f, err := v.VFS.OpenReader(dir, name)
	if err != nil {
		return nil, err
	}
	return countingFile{f, &v.reads}, nil
}

type countingFile struct {
	types.ReadableFile
	reads *atomic.Int64
}

func (f countingFile) ReadAt(p []byte, off int64) (int, error) {
	f.reads.Add(1)
	return f.ReadableFile.ReadAt(p, off)
}
