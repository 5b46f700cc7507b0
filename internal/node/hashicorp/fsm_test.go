package hashicorp

import (
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
	var a raft.BatchingFSM = raftFSM{(&node.Storage{}).Machine(f, node.Hooks{})}
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
