package etcd

import (
	"errors"
	"testing"

	"github.com/hashicorp/raft"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/fencelock/fencelock/internal/node"
	"github.com/fencelock/fencelock/internal/node/etcd/etcdcodec"
)

// storeHardState writes entries 1 (term 1) and 2 (term 2) and a hard
// state with commit, and opens the directory again.
func storeHardState(t *testing.T, commit uint64) *node.Storage {
	t.Helper()
	dir := t.TempDir()
	st, err := openTestStores(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	ents := []*raftpb.Entry{
		etcdcodec.Entry(1, 1, raftpb.EntryNormal, []byte("a")),
		etcdcodec.Entry(2, 2, raftpb.EntryNormal, []byte("b")),
	}
	if err := etcdcodec.Append(st.Logs, ents); err != nil {
		t.Fatal(err)
	}
	hs := &raftpb.HardState{Term: proto.Uint64(2), Vote: proto.Uint64(7), Commit: proto.Uint64(commit)}
	if err := etcdcodec.SaveHardState(st.Stable, hs); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st, err = openTestStores(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// The hard state and the log come back after a restart as etcd's
// MemoryStorage.
func TestEtcdLoadMemory(t *testing.T) {
	st := storeHardState(t, 1)
	ms, err := etcdcodec.LoadMemory(st.Logs, st.Stable, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := ms.InitialState()
	if err != nil {
		t.Fatal(err)
	}
	if got.GetTerm() != 2 || got.GetVote() != 7 || got.GetCommit() != 1 {
		t.Fatalf("hard state %v, want term 2 vote 7 commit 1", got)
	}
	if last, _ := ms.LastIndex(); last != 2 {
		t.Fatalf("last index %d, want 2", last)
	}
	if term, _ := ms.Term(2); term != 2 {
		t.Fatalf("term of 2 is %d, want 2", term)
	}
}

// A hard state that says entries beyond the log's end were committed is
// refused: those entries had been synced, and were lost or damaged (it
// used to be clamped to the log's end, and the node started without
// them).
func TestEtcdLoadMemoryRefusesACommitBeyondTheLog(t *testing.T) {
	st := storeHardState(t, 9)
	_, err := etcdcodec.LoadMemory(st.Logs, st.Stable, nil)
	var cb *etcdcodec.CommitBeyondLogError
	if !errors.As(err, &cb) || cb.Commit != 9 || cb.End != 2 {
		t.Fatalf("err %v, want the commit 9 beyond the log's end 2 refused", err)
	}
}

// A directory that never had etcd state loads as empty.
func TestEtcdLoadMemoryEmpty(t *testing.T) {
	st, err := openTestStores(t, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ms, err := etcdcodec.LoadMemory(st.Logs, st.Stable, nil)
	if err != nil {
		t.Fatal(err)
	}
	hs, _, _ := ms.InitialState()
	if hs.GetTerm() != 0 || hs.GetCommit() != 0 {
		t.Fatalf("hard state %v of an empty directory", hs)
	}
}

// A log that does not follow the snapshot the engine loaded (the log
// compacted behind a snapshot whose metadata then read back damaged, so
// that the store lists none) is refused with an error: raft's
// MemoryStorage panics on it, which used to end the process at start.
func TestEtcdLoadMemoryRefusesALogAfterNoSnapshot(t *testing.T) {
	logs := raft.NewInmemStore()
	ents := []*raftpb.Entry{
		etcdcodec.Entry(170, 4, raftpb.EntryNormal, []byte("a")),
		etcdcodec.Entry(171, 4, raftpb.EntryNormal, []byte("b")),
	}
	if err := etcdcodec.Append(logs, ents); err != nil {
		t.Fatal(err)
	}
	if _, err := etcdcodec.LoadMemory(logs, logs, nil); err == nil {
		t.Fatal("a log starting at 170 with no snapshot was loaded")
	}
}
