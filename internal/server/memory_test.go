package server

import (
	"bytes"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/locktable"
)

func TestGCPercentFor(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		live uint64
		want int
	}{
		{0, 100},
		{1 * mib, 100},
		{MemoryHeadroomFloor, 100},    // headroom = live: the default
		{2 * MemoryHeadroomFloor, 50}, // the floor is half the live heap
		{100 * mib, 32},
		{128 * mib, 25}, // live/4 is the floor from here on
		{180 * mib, 25},
		{8 << 30, 25},
	} {
		if got := gcPercentFor(c.live); got != c.want {
			t.Errorf("gcPercentFor(%d MiB) = %d, want %d", c.live/mib, got, c.want)
		}
	}
}

func TestMemoryPolicyWantedOnlyWithoutTheUsersSettings(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want bool
	}{
		{nil, true},
		{map[string]string{"GOGC": "50"}, false},
		{map[string]string{"GOGC": "off"}, false},
		{map[string]string{"GOMEMLIMIT": "1GiB"}, false},
		{map[string]string{"GODEBUG": "gctrace=1"}, true},
	} {
		if got := MemoryPolicyWanted(func(k string) string { return c.env[k] }); got != c.want {
			t.Errorf("env %v: wanted %v, want %v", c.env, got, c.want)
		}
	}
}

// TestMemoryPolicyFollowsTheLiveHeap keeps twice the floor live, collects,
// and waits for the policy to lower the GC percent; stop puts back 100.
func TestMemoryPolicyFollowsTheLiveHeap(t *testing.T) {
	set := make(chan int, 16)
	stop := startMemoryPolicy(func(p int) { set <- p })
	ballast := make([]byte, 2*MemoryHeadroomFloor)
	for i := range ballast {
		ballast[i] = byte(i)
	}
	runtime.GC()
	runtime.GC()
	select {
	case p := <-set:
		if p >= 100 || p < minGCPercent {
			t.Errorf("set GC percent %d with %d bytes live", p, len(ballast))
		}
	case <-time.After(time.Minute): // only a failure waits this long
		t.Fatal("the policy set no GC percent after two collections")
	}
	runtime.KeepAlive(ballast)
	stop()
	if old := debug.SetGCPercent(100); old != 100 {
		t.Errorf("after stop the GC percent is %d, want 100", old)
	}
}

type memSink struct {
	bytes.Buffer
	closed bool
}

func (s *memSink) ID() string    { return "test" }
func (s *memSink) Cancel() error { return nil }
func (s *memSink) Close() error  { s.closed = true; return nil }

// A restore, and a snapshot of at least the size set once written and
// released, each ask for freed memory to be returned; a smaller snapshot
// does not.
func TestRestoresAndBigSnapshotsSignalFreedMemory(t *testing.T) {
	f := fsm.New(nil)
	for i := range 50 {
		f.ApplyCommand(uint64(i+1), fsm.Command{Op: fsm.OpAcquire, Key: fmt.Sprint("k", i), Holder: "h", TTL: locktable.Second})
	}
	freed := make(chan struct{}, 1)
	m := &memorySignaller{FSM: f, freed: freed}
	pending := func() bool {
		select {
		case <-freed:
			return true
		default:
			return false
		}
	}
	persist := func(big int64) *memSink {
		m.big = big
		snap, err := m.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		var sink memSink
		if err := snap.Persist(&sink); err != nil || !sink.closed {
			t.Fatalf("persist: %v, closed %v", err, sink.closed)
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
	if err := m.Restore(io.NopCloser(&sink.Buffer)); err != nil {
		t.Fatal(err)
	}
	if !pending() {
		t.Error("a restore did not ask to return memory")
	}
	if l, ok := f.Get("k7", 0); !ok || l.Holder != "h" {
		t.Errorf("after the restore k7 is %+v, %v", l, ok)
	}
}
