package etcdcodec

import (
	"fmt"

	"github.com/hashicorp/raft"
	etcdraft "go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// etcdHardStateKey is where the etcd engine keeps its HardState (term,
// vote, commit) in the stable store: raft-wal's metadata database, which
// fsyncs every write. The engine writes it when the term or vote change,
// before any message that depends on them is sent; the commit index rides
// along and may be behind, which raft allows (it learns the commit again).
var etcdHardStateKey = []byte("EtcdHardState")

// SaveHardState records hs durably.
func SaveHardState(stable raft.StableStore, hs *raftpb.HardState) error {
	b, err := proto.Marshal(hs)
	if err != nil {
		return fmt.Errorf("encoding the hard state: %w", err)
	}
	if err := stable.Set(etcdHardStateKey, b); err != nil {
		return fmt.Errorf("recording the hard state: %w", err)
	}
	return nil
}

// LoadMemory fills a MemoryStorage, the log etcd reads, from the
// verified stores: the HardState and the entries first..last of logs
// (after a snapshot at snapIndex, snapTerm, when snapIndex > 0). The
// commit index recorded may lag (see the engine's hard state key) and is
// raised to the snapshot's; a log that ends before it is refused
// (*CommitBeyondLogError).
func LoadMemory(logs raft.LogStore, stable raft.StableStore, snap *raftpb.Snapshot) (ms *etcdraft.MemoryStorage, err error) {
	defer func() {
		// MemoryStorage panics (through raft's logger) on entries that do
		// not follow what it holds: a log it cannot take is refused.
		if p := recover(); p != nil {
			ms, err = nil, fmt.Errorf("raft refused the stored log: %v", p)
		}
	}()
	ms = etcdraft.NewMemoryStorage()
	snapIndex := snap.GetMetadata().GetIndex()
	if snapIndex > 0 {
		if err := ms.ApplySnapshot(snap); err != nil {
			return nil, fmt.Errorf("loading the snapshot at %d: %w", snapIndex, err)
		}
	}
	first, err := logs.FirstIndex()
	if err != nil {
		return nil, err
	}
	last, err := logs.LastIndex()
	if err != nil {
		return nil, err
	}
	if last > 0 {
		// Entries the snapshot covers are kept for slow followers; etcd
		// wants only those after it.
		lo := max(first, snapIndex+1)
		ents, err := Entries(logs, lo, last)
		if err != nil {
			return nil, err
		}
		if len(ents) > 0 && ents[0].GetIndex() != snapIndex+1 && snapIndex > 0 {
			return nil, fmt.Errorf("the log resumes at %d after the snapshot at %d", ents[0].GetIndex(), snapIndex)
		}
		if err := ms.Append(ents); err != nil {
			return nil, fmt.Errorf("loading entries %d..%d: %w", lo, last, err)
		}
	}
	b, err := GetHardState(stable)
	if err != nil {
		return nil, err
	}
	if len(b) > 0 {
		hs := new(raftpb.HardState)
		if err := proto.Unmarshal(b, hs); err != nil {
			return nil, fmt.Errorf("decoding the hard state: %w", err)
		}
		// The commit index was recorded after the entries it covers
		// had been appended and synced, and raft never drops a
		// committed entry: a log that ends before it lost some.
		if end := max(last, snapIndex); hs.GetCommit() > end {
			return nil, &CommitBeyondLogError{Commit: hs.GetCommit(), End: end}
		}
		hs.Commit = proto.Uint64(max(hs.GetCommit(), snapIndex))
		if err := ms.SetHardState(hs); err != nil {
			return nil, err
		}
	}
	return ms, nil
}

// GetHardState reads the recorded hard state; nil: none. raft-wal
// answers a missing key nil, nil; raft's in-memory store answers an
// error saying "not found", as raft itself tests for.
func GetHardState(stable raft.StableStore) ([]byte, error) {
	b, err := stable.Get(etcdHardStateKey)
	if err != nil && err.Error() != "not found" {
		return nil, fmt.Errorf("reading the hard state: %w", err)
	}
	return b, nil
}

// CommitBeyondLogError: the hard state records entries up to Commit as
// committed, but the log and snapshot end at End. Entries raft had
// committed, and so synced, were lost or read back damaged.
type CommitBeyondLogError struct{ Commit, End uint64 }

func (e *CommitBeyondLogError) Error() string {
	return fmt.Sprintf("the log ends at index %d but raft's hard state says entries up to %d were committed: "+
		"entries %d..%d were written and synced and are lost or damaged", e.End, e.Commit, e.End+1, e.Commit)
}
