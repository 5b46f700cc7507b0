package node

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"
)

// A bit flipped in a snapshot's index in meta.json (rot) made it pass
// for a snapshot of an earlier entry: the state's CRC does not cover the
// index, and the node started without the entries between (the
// simulation's seed 3000926). meta.json's own checksum makes such a
// snapshot unreadable, on the operating system's file system as on the
// simulation's; a meta.json written without one is read as before.
func TestSnapshotMetaChecksum(t *testing.T) {
	dir := t.TempDir()
	store, err := openSnapStore(OSFS{}, dir)
	if err != nil {
		t.Fatal(err)
	}
	sink, err := store.Create(1, 37, 2, raft.Configuration{}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sink.Write([]byte("state")); err != nil {
		t.Fatal(err)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	metaPath := filepath.Join(dir, "snapshots", sink.ID(), "meta.json")
	good, err := os.ReadFile(metaPath)
	if err != nil {
		t.Fatal(err)
	}
	list := func() []*raft.SnapshotMeta {
		t.Helper()
		l, err := store.List()
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	if l := list(); len(l) != 1 || l[0].Index != 37 {
		t.Fatalf("list %+v, want the snapshot of 37", l)
	}
	// '7' (0x37) with one bit flipped is '3' (0x33): index 33.
	i := bytes.Index(good, []byte(`"Index":37`))
	if i < 0 {
		t.Fatalf("no index in %s", good)
	}
	bad := bytes.Clone(good)
	bad[i+len(`"Index":3`)] ^= 0x04
	if err := os.WriteFile(metaPath, bad, 0o600); err != nil {
		t.Fatal(err)
	}
	if l := list(); len(l) != 0 {
		t.Fatalf("a meta.json with a flipped index listed: %+v", l[0])
	}
	if _, _, err := store.Open(sink.ID()); err == nil {
		t.Fatal("a meta.json with a flipped index opened")
	}
	// Written before the checksum: taken as it is.
	old := bytes.Replace(good, good[bytes.Index(good, []byte(`,"MetaCRC"`)):bytes.LastIndexByte(good, '}')], nil, 1)
	if err := os.WriteFile(metaPath, old, 0o600); err != nil {
		t.Fatal(err)
	}
	if l := list(); len(l) != 1 || l[0].Index != 37 {
		t.Fatalf("a meta.json without a checksum: list %+v, want the snapshot of 37", l)
	}
}
