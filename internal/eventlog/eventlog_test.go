package eventlog

import (
	"errors"
	"fmt"
	"testing"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/locktable"
)

func granted(key string, token uint64) locktable.Event {
	return locktable.Event{Kind: locktable.EventGranted, Key: key, Holder: "h", Token: token}
}

func all(string) bool { return true }

// Events are numbered by entry and position in it, read back in order
// after any revision, and a reader after the history is told so, naming
// where the history starts.
func TestReadAfterAnyRevisionAndCompaction(t *testing.T) {
	l := New(32, 0, 0, func(int) {})
	for i := uint64(1); i <= 100; i++ {
		l.Append(i, granted(fmt.Sprint("k", i), i))
		l.Append(i, granted(fmt.Sprint("j", i), i))
		l.Publish()
	}
	if now := l.Now(); now != (api.Revision{Index: 100, Seq: 2}) {
		t.Fatalf("now %s", now)
	}
	evs, next, _, err := l.Read(api.Revision{Index: 95, Seq: 1}, all, 3)
	if err != nil || len(evs) != 3 || evs[0].Revision != (api.Revision{Index: 95, Seq: 2}) || next != evs[2].Revision {
		t.Fatalf("read after 95.1: %v %s %v", evs, next, err)
	}
	_, _, _, err = l.Read(api.Revision{Index: 1, Seq: 1}, all, 10)
	var ce *CompactedError
	if !errors.As(err, &ce) || ce.Floor.Index < 80 {
		t.Fatalf("a read far behind the history: %v", err)
	}
	// The history kept reaches back about its size.
	evs, _, _, err = l.Read(ce.Floor, all, 1000)
	if err != nil || len(evs) < 32 || len(evs) > 64 {
		t.Fatalf("read from the floor: %d events, %v", len(evs), err)
	}
}

// A restore starts the history over after the snapshot's index.
func TestRestoredStartsOver(t *testing.T) {
	l := New(16, 0, 0, func(int) {})
	l.Append(1, granted("a", 1))
	l.Restored(50)
	if _, _, _, err := l.Read(api.Revision{Index: 1, Seq: 1}, all, 10); err == nil {
		t.Fatal("a revision before the restore was served")
	}
	l.Append(51, granted("b", 2))
	l.Publish()
	evs, _, _, err := l.Read(api.Revision{Index: 50, Seq: api.EndOfEntry}, all, 10)
	if err != nil || len(evs) != 1 || evs[0].Key != "b" {
		t.Fatalf("after the restore: %v %v", evs, err)
	}
}

// Watchers are capped in all and per caller; leaving frees the place.
func TestJoinIsCapped(t *testing.T) {
	n := 0
	l := New(16, 3, 2, func(c int) { n = c })
	for range 2 {
		if err := l.Join("a"); err != nil {
			t.Fatalf("one of two of a's refused: %v", err)
		}
	}
	var le *LimitError
	if err := l.Join("a"); !errors.As(err, &le) || le.Caller != "a" {
		t.Fatalf("a third of a's: %v", err)
	}
	if l.Join("b") != nil {
		t.Fatal("b refused")
	}
	if err := l.Join("c"); !errors.As(err, &le) || le.Caller != "" || le.Open != 3 {
		t.Fatalf("past the total: %v", err)
	}
	l.Leave("a")
	if n != 2 || l.Join("c") != nil {
		t.Fatalf("after a left: gauge %d", n)
	}
}

// A batch's events are seen together or not at all: appended, they wait
// for Publish, which wakes the watchers once.
func TestEventsAreSeenOnlyOncePublished(t *testing.T) {
	l := New(64, 0, 0, func(int) {})
	l.Append(1, granted("a", 1))
	l.Publish()
	_, _, wake, err := l.Read(api.Revision{Index: 1, Seq: 1}, all, 10)
	if err != nil {
		t.Fatal(err)
	}
	l.Append(2, granted("b", 2))
	l.Append(3, granted("c", 3))
	if now := l.Now(); now != (api.Revision{Index: 1, Seq: 1}) {
		t.Fatalf("now %s before the batch is published", now)
	}
	evs, next, _, err := l.Read(api.Revision{Index: 1, Seq: 1}, all, 10)
	if err != nil || len(evs) != 0 || next != (api.Revision{Index: 1, Seq: 1}) {
		t.Fatalf("a read of an unpublished batch: %v %s %v", evs, next, err)
	}
	stop := make(chan struct{})
	defer close(stop)
	go l.Broadcast(stop)
	l.Publish()
	<-wake
	evs, next, _, err = l.Read(api.Revision{Index: 1, Seq: 1}, all, 10)
	if err != nil || len(evs) != 2 || next != (api.Revision{Index: 3, Seq: 1}) {
		t.Fatalf("after Publish: %v %s %v", evs, next, err)
	}
}
