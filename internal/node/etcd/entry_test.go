package etcd

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/fencelock/fencelock/internal/node"
	"github.com/fencelock/fencelock/internal/node/etcd/etcdcodec"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

func openTestStores(t *testing.T, dir string) (*node.Storage, error) {
	t.Helper()
	return node.OpenStorage(node.Config{DataDir: dir, Logger: slog.New(slog.DiscardHandler)}, node.EngineEtcd)
}

// etcd entries survive a restart through the checked log, a replaced
// tail included.
func TestEtcdEntriesRoundTrip(t *testing.T) {
	dir := t.TempDir()
	st, err := openTestStores(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	ents := []*raftpb.Entry{
		etcdcodec.Entry(1, 1, raftpb.EntryConfChangeV2, []byte("cc")),
		etcdcodec.Entry(2, 1, raftpb.EntryNormal, nil),
		etcdcodec.Entry(3, 1, raftpb.EntryNormal, []byte("three")),
		etcdcodec.Entry(4, 1, raftpb.EntryNormal, []byte("four")),
	}
	if err := etcdcodec.Append(st.Logs, ents); err != nil {
		t.Fatal(err)
	}
	// A new leader's entries replace 3..4.
	repl := []*raftpb.Entry{etcdcodec.Entry(3, 2, raftpb.EntryNormal, []byte("new three"))}
	if err := etcdcodec.Append(st.Logs, repl); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st, err = openTestStores(t, dir)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer st.Close()
	got, err := etcdcodec.Entries(st.Logs, 1, 3)
	if err != nil {
		t.Fatal(err)
	}
	want := append(ents[:2:2], repl...)
	if len(got) != len(want) {
		t.Fatalf("%d entries after restart, want %d", len(got), len(want))
	}
	for i := range want {
		if !proto.Equal(got[i], want[i]) {
			t.Fatalf("entry %d after restart: got %v, want %v", i+1, got[i], want[i])
		}
	}
	if last, _ := st.Logs.LastIndex(); last != 3 {
		t.Fatalf("last index %d, want 3", last)
	}
}

// A flipped byte inside an etcd entry refuses the data directory, as for
// the hashicorp node.
func TestEtcdEntriesDamageRefused(t *testing.T) {
	dir := t.TempDir()
	st, err := openTestStores(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	payload := []byte("a payload that is easy to find in the segment")
	var ents []*raftpb.Entry
	for i := uint64(1); i <= 5; i++ {
		ents = append(ents, etcdcodec.Entry(i, 1, raftpb.EntryNormal, payload))
	}
	if err := etcdcodec.Append(st.Logs, ents); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	segs, err := filepath.Glob(filepath.Join(dir, "wal", "*.wal"))
	if err != nil || len(segs) == 0 {
		t.Fatalf("segments %v: %v", segs, err)
	}
	sort.Strings(segs)
	path := segs[0]
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// The second occurrence: entry 2, in the middle of the log.
	first := indexOf(b, payload, 0)
	at := indexOf(b, payload, first+1)
	if at < 0 {
		t.Fatal("payload not found twice in the segment")
	}
	b[at] ^= 0xff
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	st, err = openTestStores(t, dir)
	if err == nil {
		st.Close()
		t.Fatal("a damaged entry was accepted")
	}
	var de *node.DataDirError
	if !errors.As(err, &de) {
		t.Fatalf("error %v is not a *node.DataDirError", err)
	}
}

func indexOf(b, sub []byte, from int) int {
	for i := from; i+len(sub) <= len(b); i++ {
		if string(b[i:i+len(sub)]) == string(sub) {
			return i
		}
	}
	return -1
}
