package node

import (
	"strconv"
	"testing"
	"time"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/locktable"
)

// acquireEntries is n acquires of distinct keys, entries from first on.
func acquireEntries(t *testing.T, first uint64, n int) []fsm.Entry {
	t.Helper()
	var ents []fsm.Entry
	for i := range n {
		d, err := fsm.Encode(fsm.Command{Op: fsm.OpAcquire, Key: "k" + strconv.Itoa(i), Holder: "h", TTL: locktable.Second})
		if err != nil {
			t.Fatal(err)
		}
		ents = append(ents, fsm.Entry{Index: first + uint64(i), Term: 1, Data: d})
	}
	return ents
}

// The machine batches as the state machine does: each command entry is
// timed, and a batch whose grants pass the token ceiling has raised it
// (fsynced) by the time ApplyBatch returns, before the engine answers any
// entry.
func TestMachineAppliesBatches(t *testing.T) {
	state, err := openStateFile(OSFS{}, t.TempDir(), dirState{CRCFrom: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer state.close()
	f := fsm.New(nil)
	timed := 0
	m := newMachine(f, newTokenFloor(state), Hooks{Applied: func(time.Duration) { timed++ }})
	ents := acquireEntries(t, 1, tokenBlock+10)
	out := m.ApplyBatch(ents)
	if len(out) != len(ents) {
		t.Fatalf("%d answers to %d entries", len(out), len(ents))
	}
	for i, e := range ents {
		if r := out[i]; r.Err != nil || r.Index != e.Index || !r.Granted {
			t.Fatalf("entry %d answered %#v", e.Index, r)
		}
	}
	if last := f.LastToken(); last != tokenBlock+10 || state.get().Ceiling < last {
		t.Fatalf("last token %d, ceiling %d", last, state.get().Ceiling)
	}
	if want := tokenBlock + 10; timed != want {
		t.Fatalf("%d entries timed, want %d", timed, want)
	}
}
