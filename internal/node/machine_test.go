package node

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/locktable"
)

// A restore, and a snapshot of at least the size set once written and
// released, each ask for freed memory to be returned; a smaller snapshot
// does not.
func TestRestoresAndBigSnapshotsSignalFreedMemory(t *testing.T) {
	f := fsm.New(nil)
	for i := range 50 {
		f.ApplyCommand(uint64(i+1), fsm.Command{Op: fsm.OpAcquire, Key: fmt.Sprint("k", i), Holder: "h", TTL: locktable.Second})
	}
	m := newMachine(f, nil, Hooks{})
	freed := m.freed
	pending := func() bool {
		select {
		case <-freed:
			return true
		default:
			return false
		}
	}
	persist := func(big int64) *bytes.Buffer {
		m.big = big
		snap := m.Snapshot()
		var sink bytes.Buffer
		if _, err := snap.WriteTo(&sink); err != nil {
			t.Fatalf("write: %v", err)
		}
		snap.Release()
		return &sink
	}
	sink := persist(1 << 30)
	if pending() {
		t.Error("a small snapshot asked to return memory")
	}
	persist(int64(sink.Len()))
	if !pending() {
		t.Error("a snapshot of the size set did not ask to return memory")
	}
	if err := m.Restore(sink); err != nil {
		t.Fatal(err)
	}
	if !pending() {
		t.Error("a restore did not ask to return memory")
	}
	if l, ok := f.Get("k7", 0); !ok || l.Holder != "h" {
		t.Errorf("after the restore k7 is %+v, %v", l, ok)
	}
}

// A replay ends when the state machine has applied the entry it was
// given, and asks then for the memory it grew to be returned.
func TestReplayEndsAtItsLastEntry(t *testing.T) {
	f := fsm.New(nil)
	m := newMachine(f, nil, Hooks{})
	m.Replaying(3)
	apply := func(i uint64) {
		t.Helper()
		data, err := fsm.Encode(fsm.Command{Op: fsm.OpAcquire, Key: fmt.Sprint("k", i), Holder: "h", TTL: locktable.Second})
		if err != nil {
			t.Fatal(err)
		}
		m.ApplyBatch([]fsm.Entry{{Index: i, Term: 1, Data: data}})
	}
	apply(1)
	apply(2)
	if m.replay.Load() == nil || len(m.freed) != 0 {
		t.Fatal("the replay ended before its last entry")
	}
	apply(3)
	if m.replay.Load() != nil || len(m.freed) != 1 {
		t.Fatal("the replay did not end at its last entry")
	}
}

// A replay that will not finish (the engine stops) ends without asking
// to return memory.
func TestEndReplay(t *testing.T) {
	m := newMachine(fsm.New(nil), nil, Hooks{})
	m.Replaying(5)
	m.EndReplay()
	m.EndReplay()
	if m.replay.Load() != nil || len(m.freed) != 0 {
		t.Fatal("EndReplay left the replay on, or asked to return memory")
	}
}
