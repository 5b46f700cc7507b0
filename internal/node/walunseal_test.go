package node

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
	walfs "github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/segment"
	"github.com/hashicorp/raft-wal/types"
)

// A sealed segment that the metadata calls open: raft-wal's own recovery
// reads it back sealed (nothing can be appended, ever); after unsealTail
// it reads back unsealed with every entry.
func TestUnsealTailKeepsEveryEntry(t *testing.T) {
	src := t.TempDir()
	w, err := wal.Open(src, wal.WithSegmentSize(8<<10))
	if err != nil {
		t.Fatal(err)
	}
	// Append until the first segment is sealed and the second one exists.
	var n uint64
	for n = 1; ; n++ {
		if err := w.StoreLogs([]*raft.Log{{Index: n, Term: 1, Data: fmt.Appendf(nil, "entry %d", n)}}); err != nil {
			t.Fatal(err)
		}
		if m, _ := filepath.Glob(filepath.Join(src, "*-0000000000000001.wal")); len(m) == 1 {
			break
		}
		if n > 10000 {
			t.Fatal("no rotation")
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	first, _ := filepath.Glob(filepath.Join(src, "*-0000000000000000.wal"))
	if len(first) != 1 {
		t.Fatalf("first segment: %v", first)
	}
	// The broken data dir: only the sealed segment, as the last one.
	dir := t.TempDir()
	raw, err := os.ReadFile(first[0])
	if err != nil {
		t.Fatal(err)
	}
	name := filepath.Base(first[0])
	if err := os.WriteFile(filepath.Join(dir, name), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	info := types.SegmentInfo{ID: 0, BaseIndex: 1, MinIndex: 1, SizeLimit: 8 << 10, Codec: wal.CodecBinaryV1}
	recover := func() types.SegmentWriter {
		t.Helper()
		sw, err := segment.NewFiler(dir, walfs.New()).RecoverTail(info)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sw.Close() })
		return sw
	}
	if sealed, _, _ := recover().Sealed(); !sealed {
		t.Fatal("the copied segment does not read back sealed: the test does not set up the broken state")
	}

	path, err := unsealTail(OSFS{}, dir)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(path) != name {
		t.Errorf("unsealed %s, want %s", path, name)
	}
	sw := recover()
	if sealed, _, _ := sw.Sealed(); sealed {
		t.Fatal("still sealed after unsealTail")
	}
	last := sw.LastIndex()
	if last == 0 || last >= n {
		t.Fatalf("LastIndex %d, want the first segment's entries (rotation at %d)", last, n)
	}
	for i := uint64(1); i <= last; i++ {
		buf, err := sw.GetLog(i)
		if err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		buf.Close()
	}
	// A second call finds nothing sealed and changes nothing.
	if _, err := unsealTail(OSFS{}, dir); err == nil {
		t.Error("unsealTail of an unsealed segment did not refuse")
	}
}
