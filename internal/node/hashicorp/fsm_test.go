package hashicorp

import (
	"reflect"
	"strconv"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/locktable"
	"github.com/fencelock/fencelock/internal/node"
)

// hashicorp/raft sees a batching FSM: its command entries reach the
// machine in one batch, its configuration entries are answered nil and
// change nothing.
func TestRaftFSMAdaptsBatches(t *testing.T) {
	f := fsm.New(nil)
	var a raft.BatchingFSM = raftFSM{m: (&node.Storage{}).Machine(f, node.Hooks{})}
	var logs []*raft.Log
	for i := range 6 {
		d, err := fsm.Encode(fsm.Command{Op: fsm.OpAcquire, Key: "k" + strconv.Itoa(i), Holder: "h", TTL: locktable.Second})
		if err != nil {
			t.Fatal(err)
		}
		if i == 3 {
			logs = append(logs, &raft.Log{Index: uint64(len(logs) + 1), Type: raft.LogConfiguration,
				Data: raft.EncodeConfiguration(raft.Configuration{Servers: []raft.Server{{ID: "n1", Address: "a"}}})})
		}
		logs = append(logs, &raft.Log{Index: uint64(len(logs) + 1), Term: 1, Type: raft.LogCommand, Data: d})
	}
	out := a.ApplyBatch(logs)
	if len(out) != len(logs) {
		t.Fatalf("%d answers to %d entries", len(out), len(logs))
	}
	for i, l := range logs {
		r, _ := out[i].(*fsm.Result)
		if (l.Type == raft.LogCommand) != (r != nil) || (r != nil && (r.Err != nil || r.Index != l.Index || !r.Granted)) {
			t.Fatalf("entry %d (%v) answered %#v", l.Index, l.Type, out[i])
		}
	}
	if f.LastToken() != 6 || f.AppliedIndex() != uint64(len(logs)) {
		t.Fatalf("last token %d, applied %d", f.LastToken(), f.AppliedIndex())
	}
}

// The commands a restart replays are answered nil: those at or below the
// log's last command at open and of no later term. A later entry, or one
// of a later term at a replayed index (a later leader's, which may be
// this node's own proposal), gets its Result.
func TestRaftFSMLeavesTheReplayUnanswered(t *testing.T) {
	f := fsm.New(nil)
	a := raftFSM{m: (&node.Storage{}).Machine(f, node.Hooks{}), old: raftPos{index: 4, term: 2}, ents: new([]fsm.Entry)}
	cmd := func(index, term uint64, key string) *raft.Log {
		d, err := fsm.Encode(fsm.Command{Op: fsm.OpAcquire, Key: key, Holder: "h", TTL: locktable.Second})
		if err != nil {
			t.Fatal(err)
		}
		return &raft.Log{Index: index, Term: term, Type: raft.LogCommand, Data: d}
	}
	answered := func(logs []*raft.Log) []bool {
		var got []bool
		for i, r := range a.ApplyBatch(logs) {
			r, _ := r.(*fsm.Result)
			if r != nil && (r.Err != nil || r.Index != logs[i].Index || !r.Granted) {
				t.Fatalf("entry %d answered %+v", logs[i].Index, r)
			}
			got = append(got, r != nil)
		}
		return got
	}
	if got := answered([]*raft.Log{cmd(1, 1, "a"), cmd(2, 2, "b")}); !reflect.DeepEqual(got, []bool{false, false}) {
		t.Fatalf("replayed entries answered: %v", got)
	}
	// 3 is replayed; 4 replaces the old tail's, in a later term; 5 is new.
	if got := answered([]*raft.Log{cmd(3, 2, "c"), cmd(4, 3, "d"), cmd(5, 3, "e")}); !reflect.DeepEqual(got, []bool{false, true, true}) {
		t.Fatalf("answered %v, want the entries of term 3 only", got)
	}
	if f.LastToken() != 5 || f.AppliedIndex() != 5 {
		t.Fatalf("last token %d, applied %d", f.LastToken(), f.AppliedIndex())
	}
}
