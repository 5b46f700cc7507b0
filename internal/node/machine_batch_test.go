package node

import (
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/locktable"
)

// acquireLogs is n acquires of distinct keys, entries from first on,
// with a configuration entry in the middle.
func acquireLogs(t *testing.T, first uint64, n int) []*raft.Log {
	t.Helper()
	var logs []*raft.Log
	for i := range n {
		if i == n/2 {
			logs = append(logs, &raft.Log{Index: first + uint64(len(logs)), Type: raft.LogConfiguration,
				Data: raft.EncodeConfiguration(raft.Configuration{Servers: []raft.Server{{ID: "n1", Address: "a"}}})})
		}
		d, err := fsm.Encode(fsm.Command{Op: fsm.OpAcquire, Key: "k" + strconv.Itoa(i), Holder: "h", TTL: locktable.Second})
		if err != nil {
			t.Fatal(err)
		}
		logs = append(logs, &raft.Log{Index: first + uint64(len(logs)), Type: raft.LogCommand, Data: d})
	}
	return logs
}

// The machine batches as the state machine does: raft sees a batching
// FSM, each command entry is timed, and a batch whose grants pass the
// token ceiling has raised it (fsynced) by the time ApplyBatch returns,
// before raft answers any entry.
func TestMachineAppliesBatches(t *testing.T) {
	state, err := openStateFile(t.TempDir(), dirState{CRCFrom: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer state.close()
	f := fsm.New(nil)
	timed := 0
	m := newMachine(f, newTokenFloor(state), Hooks{Applied: func(time.Duration) { timed++ }})
	var _ raft.BatchingFSM = m
	logs := acquireLogs(t, 1, tokenBlock+10)
	out := m.ApplyBatch(logs)
	if len(out) != len(logs) {
		t.Fatalf("%d answers to %d entries", len(out), len(logs))
	}
	for i, l := range logs {
		r, _ := out[i].(*fsm.Result)
		if (l.Type == raft.LogCommand) != (r != nil) || (r != nil && (r.Err != nil || r.Index != l.Index)) {
			t.Fatalf("entry %d (%v) answered %#v", l.Index, l.Type, out[i])
		}
	}
	if last := f.LastToken(); last != tokenBlock+10 || state.get().Ceiling < last {
		t.Fatalf("last token %d, ceiling %d", last, state.get().Ceiling)
	}
	if want := tokenBlock + 10; timed != want {
		t.Fatalf("%d entries timed, want %d", timed, want)
	}
}
