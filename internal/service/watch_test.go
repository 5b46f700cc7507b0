package service

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/api"
)

type watchResult struct {
	r   api.WatchResponse
	err error
}

func goWatch(ctx context.Context, s *Service, req api.WatchRequest) <-chan watchResult {
	ch := make(chan watchResult, 1)
	go func() {
		r, err := s.Watch(ctx, req, WatchScope{})
		ch <- watchResult{r, err}
	}()
	return ch
}

func awaitWatch(t *testing.T, ch <-chan watchResult) watchResult {
	t.Helper()
	select {
	case a := <-ch:
		return a
	case <-time.After(20 * time.Second):
		t.Fatal("the watch never answered")
		return watchResult{}
	}
}

// describe is events as "type key holder token", for comparing.
func describe(evs []api.WatchEvent) string {
	var out []string
	for _, e := range evs {
		out = append(out, fmt.Sprintf("%s %s %s %d", e.Type, e.Key, e.Holder, e.Token))
	}
	return strings.Join(out, "; ")
}

// A watch after a revision answers the matching events after it, in
// order; a long-poll at the present waits for the next matching event and
// answers only it, however many changes to other keys come first.
func TestWatchLongPollAfterARevision(t *testing.T) {
	s, _, fake := newTestService(t)
	ctx := context.Background()
	start := s.Revision()
	mustAcquire(t, s, api.AcquireRequest{Key: "k", Holder: "a", TTLMs: 1000})
	mustAcquire(t, s, api.AcquireRequest{Key: "other", Holder: "a", TTLMs: 60000})
	fake.Advance(time.Second) // a's lease expires by the tick
	eventually(t, "a's expiry committed by the tick", func() bool {
		r, _ := s.Watch(ctx, api.WatchRequest{Key: "k", After: &start}, WatchScope{})
		return len(r.Events) == 2
	})
	r, err := s.Watch(ctx, api.WatchRequest{Key: "k", After: &start}, WatchScope{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := describe(r.Events), "granted k a 1; expired k a 1"; got != want {
		t.Fatalf("events %q, want %q", got, want)
	}
	if r.Events[0].Revision.Compare(start) <= 0 || r.Events[1].Revision.Compare(r.Events[0].Revision) <= 0 || r.Revision.Compare(r.Events[1].Revision) < 0 {
		t.Fatalf("revisions not rising: start %v, events %+v, next %v", start, r.Events, r.Revision)
	}
	if r.Events[0].TTLMs != 1000 {
		t.Fatalf("granted event %+v; want ttl 1000", r.Events[0])
	}

	// Limit answers the first events, and the revision to go on from.
	lim, _ := s.Watch(ctx, api.WatchRequest{Prefix: "", After: &start, Limit: 1}, WatchScope{})
	if len(lim.Events) != 1 || lim.Revision != lim.Events[0].Revision {
		t.Fatalf("limit 1: %+v", lim)
	}

	now := s.Revision()
	poll := goWatch(ctx, s, api.WatchRequest{Key: "k", After: &now, WaitMs: 60000})
	mustAcquire(t, s, api.AcquireRequest{Key: "other2", Holder: "b", TTLMs: 60000})
	b := mustAcquire(t, s, api.AcquireRequest{Key: "k", Holder: "b", TTLMs: 60000})
	got := awaitWatch(t, poll)
	if got.err != nil || describe(got.r.Events) != fmt.Sprintf("granted k b %d", b.Token) {
		t.Fatalf("long-poll answered %q %v; want b's grant alone", describe(got.r.Events), got.err)
	}
}

// A long-poll with nothing to report answers, when its wait runs out on
// the fake clock, no events and the revision it is at.
func TestWatchLongPollRunsOut(t *testing.T) {
	s, _, fake := newTestService(t)
	ctx := context.Background()
	mustAcquire(t, s, api.AcquireRequest{Key: "k", Holder: "a", TTLMs: 3600000})
	now := s.Revision()
	poll := goWatch(ctx, s, api.WatchRequest{Key: "k", After: &now, WaitMs: 1000})
	// The watch arms its timer after it starts; advance until it has
	// run out (each step is a whole wait, so one armed timer fires).
	var got watchResult
	eventually(t, "the long-poll to run out", func() bool {
		select {
		case got = <-poll:
			return true
		default:
			fake.Advance(time.Second)
			return false
		}
	})
	if got.err != nil || len(got.r.Events) != 0 || got.r.Revision != now {
		t.Fatalf("long-poll ran out with %+v %v; want no events at %v", got.r, got.err, now)
	}
}

// list=true answers the live leases and the revision they were read at:
// a watch after that revision sees what changed since, nothing before.
func TestWatchListThenResume(t *testing.T) {
	s, _, _ := newTestService(t)
	ctx := context.Background()
	x := mustAcquire(t, s, api.AcquireRequest{Key: "p/x", Holder: "a", TTLMs: 60000})
	mustAcquire(t, s, api.AcquireRequest{Key: "p/y", Holder: "b", TTLMs: 60000})
	mustAcquire(t, s, api.AcquireRequest{Key: "q", Holder: "c", TTLMs: 60000})
	l, err := s.Watch(ctx, api.WatchRequest{Prefix: "p/", List: true}, WatchScope{})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Locks) != 2 || l.Locks[0].Key != "p/x" || l.Locks[1].Key != "p/y" || l.Locks[0].Token != x.Token || len(l.Events) != 0 {
		t.Fatalf("list answered %+v", l)
	}
	if l.Revision != (api.Revision{Index: s.fsm.AppliedIndex(), Seq: api.EndOfEntry}) {
		t.Fatalf("list revision %v, want the end of entry %d", l.Revision, s.fsm.AppliedIndex())
	}
	s.Release(ctx, api.ReleaseRequest{Key: "p/x", Holder: "a"})
	r, err := s.Watch(ctx, api.WatchRequest{Prefix: "p/", After: &l.Revision}, WatchScope{})
	if err != nil || describe(r.Events) != fmt.Sprintf("released p/x a %d", x.Token) {
		t.Fatalf("after the list: %q %v; want the release alone", describe(r.Events), err)
	}
}

// A watch after a revision the history no longer holds is refused
// compacted, naming the oldest revision it may resume after; from there
// it misses nothing that is kept. A stream from before it ends with the
// same refusal.
func TestWatchCompacted(t *testing.T) {
	s, _, _ := newTestServiceWith(t, func(c *Config) { c.WatchHistory = 2 })
	ctx := context.Background()
	start := s.Revision()
	for i := range 5 {
		mustAcquire(t, s, api.AcquireRequest{Key: fmt.Sprintf("k%d", i), Holder: "a", TTLMs: 60000})
	}
	_, err := s.Watch(ctx, api.WatchRequest{After: &start}, WatchScope{})
	e := wantCode(t, err, api.CodeCompacted)
	if e.CompactRevision == nil || e.CompactRevision.Compare(start) <= 0 {
		t.Fatalf("compacted answer names %v", e.CompactRevision)
	}
	r, err := s.Watch(ctx, api.WatchRequest{After: e.CompactRevision}, WatchScope{})
	if err != nil || describe(r.Events) != "granted k3 a 4; granted k4 a 5" {
		t.Fatalf("from the compact revision: %q %v", describe(r.Events), err)
	}

	var items []StreamItem
	err = s.Stream(ctx, api.WatchRequest{After: &start}, WatchScope{}, func(b []StreamItem) bool {
		items = append(items, b...)
		return true
	})
	if err != nil || len(items) != 2 || items[0].Event != nil || items[0].Revision != start || items[1].Err == nil || items[1].Err.Code != api.CodeCompacted {
		t.Fatalf("stream from a compacted revision: %+v %v; want a progress frame then compacted", items, err)
	}
}

// Stream without HTTP: the first item is progress at the start revision,
// events follow as they are applied, and after StreamProgress of fake
// time with nothing to send a progress item says where the stream is
// (past changes to keys it does not watch).
func TestStreamProgressAndEvents(t *testing.T) {
	s, _, fake := newTestService(t)
	ctx, cancel := context.WithCancel(context.Background())
	mustAcquire(t, s, api.AcquireRequest{Key: "before", Holder: "a", TTLMs: 3600000})
	start := s.Revision()
	batches := make(chan []StreamItem, 16)
	done := make(chan error, 1)
	go func() {
		done <- s.Stream(ctx, api.WatchRequest{Key: "k"}, WatchScope{}, func(b []StreamItem) bool {
			select {
			case batches <- append([]StreamItem(nil), b...):
				return true
			case <-ctx.Done():
				return false
			}
		})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("stream ended with %v", err)
		}
	}()
	next := func(what string) []StreamItem {
		t.Helper()
		select {
		case b := <-batches:
			return b
		case <-time.After(20 * time.Second):
			t.Fatalf("no batch: %s", what)
			return nil
		}
	}
	first := next("the start")
	if len(first) != 1 || first[0].Event != nil || first[0].Err != nil || first[0].Revision != start {
		t.Fatalf("first batch %+v; want one progress item at %v", first, start)
	}

	l := mustAcquire(t, s, api.AcquireRequest{Key: "k", Holder: "a", TTLMs: 3600000})
	ev := next("k's grant")
	if len(ev) != 1 || ev[0].Event == nil || ev[0].Event.Type != api.WatchGranted || ev[0].Event.Token != l.Token || ev[0].Revision != ev[0].Event.Revision {
		t.Fatalf("event batch %+v; want k's grant", ev)
	}

	mustAcquire(t, s, api.AcquireRequest{Key: "other", Holder: "a", TTLMs: 3600000})
	past := s.Revision()
	fake.Advance(StreamProgress - time.Millisecond)
	select {
	case b := <-batches:
		t.Fatalf("a batch before StreamProgress passed: %+v", b)
	default:
	}
	fake.Advance(time.Millisecond)
	p := next("the progress item")
	if len(p) != 1 || p[0].Event != nil || p[0].Err != nil || p[0].Revision != past {
		t.Fatalf("progress batch %+v; want one progress item at %v (past the other key's grant)", p, past)
	}

	// The next progress comes StreamProgress after this one.
	fake.Advance(StreamProgress)
	if p := next("the second progress item"); len(p) != 1 || p[0].Event != nil || p[0].Revision != past {
		t.Fatalf("second progress batch %+v", p)
	}
}
