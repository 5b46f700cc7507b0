package hashicorp

import (
	"errors"
	"testing"

	"github.com/fencelock/fencelock/internal/replica"
	"github.com/hashicorp/raft"
)

// countingStore counts the reads that reach it and can fail writes.
type countingStore struct {
	*raft.InmemStore
	reads int
	fail  error
}

func (s *countingStore) GetLog(i uint64, l *raft.Log) error {
	s.reads++
	return s.InmemStore.GetLog(i, l)
}

func (s *countingStore) StoreLogs(logs []*raft.Log) error {
	if s.fail != nil {
		return s.fail
	}
	return s.InmemStore.StoreLogs(logs)
}

func entries(from, to uint64) []*raft.Log {
	var out []*raft.Log
	for i := from; i <= to; i++ {
		out = append(out, &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: []byte{byte(i)}})
	}
	return out
}

func TestRecentLogsServeWhatWasJustStored(t *testing.T) {
	store := &countingStore{InmemStore: raft.NewInmemStore()}
	c := newRecentLogs(store, 8)
	if err := c.StoreLogs(entries(1, 20)); err != nil {
		t.Fatal(err)
	}
	var l raft.Log
	for i := uint64(13); i <= 20; i++ {
		if err := c.GetLog(i, &l); err != nil || l.Index != i || l.Data[0] != byte(i) {
			t.Fatalf("entry %d: %+v %v", i, l, err)
		}
	}
	if store.reads != 0 {
		t.Fatalf("%d reads reached the store for the last 8 entries", store.reads)
	}
	// Older than the ring: from the store.
	if err := c.GetLog(3, &l); err != nil || l.Index != 3 || store.reads != 1 {
		t.Fatalf("entry 3: %+v %v, %d store reads", l, err, store.reads)
	}
	// A delete empties the ring; what is left is read from the store.
	if err := c.DeleteRange(18, 20); err != nil {
		t.Fatal(err)
	}
	if err := c.GetLog(19, &l); err == nil {
		t.Fatalf("entry 19 was read after its deletion: %+v", l)
	}
	if err := c.GetLog(17, &l); err != nil || l.Index != 17 || store.reads != 3 {
		t.Fatalf("entry 17 after the delete: %+v %v, %d store reads", l, err, store.reads)
	}
	if !newRecentLogs(monotonicInmem{raft.NewInmemStore()}, 4).IsMonotonic() {
		t.Fatal("a monotonic store behind the ring was not reported monotonic")
	}
}

// A write the store refuses is not cached, and its error comes back as
// the store gave it, so that a storage error still reaches the proposer.
func TestRecentLogsKeepTheStoresError(t *testing.T) {
	store := &countingStore{InmemStore: raft.NewInmemStore()}
	c := newRecentLogs(store, 8)
	planted := &replica.StorageError{Err: errors.New("disk full")}
	store.fail = planted
	err := c.StoreLogs(entries(1, 2))
	var se *replica.StorageError
	if !errors.As(err, &se) || se != planted {
		t.Fatalf("the store's error came back as %v (%T)", err, err)
	}
	var l raft.Log
	if err := c.GetLog(1, &l); err == nil {
		t.Fatalf("a refused entry was served: %+v", l)
	}
}

type monotonicInmem struct{ *raft.InmemStore }

func (monotonicInmem) IsMonotonic() bool { return true }
