package etcdcodec

import (
	"errors"
	"fmt"

	"github.com/hashicorp/raft"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// The etcd-io/raft engine (--engine etcd) keeps its log in the same
// verified stores as the hashicorp node (openStores: raft-wal under
// checkedLog's CRC-32C per entry, the state file's Durable watermark), so
// that a damaged log is refused at start by the same checks (`fencelock
// recover`, which does not read this log, sets it aside whole and keeps
// the token floor). An etcd entry is stored as a raft.Log of the same
// index and term, its data as the log's data, and its etcd type in one
// byte of Extensions (checkedLog seals Extensions with the rest).
//
// Every etcd entry is stored as a LogCommand: a hashicorp node never
// reads this log (the data directory records its engine), and tools that
// do see no hashicorp configuration entry they would misread.

// go.etcd.io/raft/v3 v3.7.0's raftpb is protobuf-go with optional
// (pointer) fields: entries are read through their getters and built
// with proto.Uint64.

// errNotEtcdEntry: a stored entry is not one the etcd engine wrote.
var errNotEtcdEntry = errors.New("etcd: not an etcd engine entry")

// etcdExtLen is the length of the Extensions an etcd entry is stored with.
const etcdExtLen = 1

// etcdToLog is the raft.Log that stores e.
func etcdToLog(e *raftpb.Entry) *raft.Log {
	return &raft.Log{Index: e.GetIndex(), Term: e.GetTerm(), Type: raft.LogCommand, Data: e.GetData(),
		Extensions: []byte{byte(e.GetType())}}
}

// Entry builds an entry.
func Entry(index, term uint64, t raftpb.EntryType, data []byte) *raftpb.Entry {
	return &raftpb.Entry{Index: proto.Uint64(index), Term: proto.Uint64(term), Type: t.Enum(), Data: data}
}

// etcdFromLog is the etcd entry l stores, after checkedLog verified it.
func etcdFromLog(l *raft.Log) (*raftpb.Entry, error) {
	if l.Type != raft.LogCommand || len(l.Extensions) != etcdExtLen {
		return nil, fmt.Errorf("%w: entry %d was not written by the etcd engine", errNotEtcdEntry, l.Index)
	}
	t := raftpb.EntryType(l.Extensions[0])
	switch t {
	case raftpb.EntryNormal, raftpb.EntryConfChange, raftpb.EntryConfChangeV2:
	default:
		return nil, fmt.Errorf("%w: entry %d has the unknown etcd type %d", errNotEtcdEntry, l.Index, t)
	}
	return Entry(l.Index, l.Term, t, l.Data), nil
}

// Append stores ents, which follow or overwrite the log's tail as
// etcd's Ready hands them: a suffix they replace is deleted first
// (checkedLog lowers the watermark before it deletes). The log's append
// fsyncs before it returns.
func Append(logs raft.LogStore, ents []*raftpb.Entry) error {
	if len(ents) == 0 {
		return nil
	}
	last, err := logs.LastIndex()
	if err != nil {
		return err
	}
	if first := ents[0].GetIndex(); first <= last {
		if err := logs.DeleteRange(first, last); err != nil {
			return fmt.Errorf("replacing entries %d..%d: %w", first, last, err)
		}
	}
	out := make([]*raft.Log, len(ents))
	for i, e := range ents {
		out[i] = etcdToLog(e)
	}
	return logs.StoreLogs(out)
}

// ReadError is an entry the log store could not give back.
type ReadError struct {
	Index uint64
	Err   error
}

func (e *ReadError) Error() string { return fmt.Sprintf("reading entry %d: %v", e.Index, e.Err) }
func (e *ReadError) Unwrap() error { return e.Err }

// Entries reads lo..hi (inclusive) back as etcd entries.
func Entries(logs raft.LogStore, lo, hi uint64) ([]*raftpb.Entry, error) {
	if hi < lo {
		return nil, nil
	}
	out := make([]*raftpb.Entry, 0, hi-lo+1)
	var l raft.Log
	for i := lo; i <= hi; i++ {
		if err := logs.GetLog(i, &l); err != nil {
			return nil, &ReadError{Index: i, Err: err}
		}
		e, err := etcdFromLog(&l)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}
