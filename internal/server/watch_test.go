package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/clock"
	"github.com/fencelock/fencelock/internal/framing"
	"github.com/fencelock/fencelock/internal/service"
)

// watchAnswer is one long-poll's answer: the events, or the error.
type watchReply struct {
	status int
	resp   api.WatchResponse
	err    api.Error
}

func watchURL(q url.Values) string { return api.PathWatch + "?" + q.Encode() }

func (ts *testServer) watchCtx(ctx context.Context, q url.Values) watchReply {
	ts.t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, ts.url+watchURL(q), nil)
	if err != nil {
		ts.t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return watchReply{}
		}
		ts.t.Errorf("watch %v: %v", q, err)
		return watchReply{}
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	w := watchReply{status: resp.StatusCode}
	target := any(&w.resp)
	if resp.StatusCode != 200 {
		target = &w.err
	}
	if err := json.Unmarshal(raw, target); err != nil {
		ts.t.Fatalf("watch %v: %d %q: %v", q, resp.StatusCode, raw, err)
	}
	return w
}

func (ts *testServer) watch(q url.Values) watchReply {
	ts.t.Helper()
	return ts.watchCtx(context.Background(), q)
}

// q builds a query from pairs.
func q(kv ...string) url.Values {
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		v.Set(kv[i], kv[i+1])
	}
	return v
}

// line is an event as the tests compare it.
func line(e api.WatchEvent) string {
	s := fmt.Sprintf("%s %s %s %s", e.Revision, e.Type, e.Key, e.Holder)
	if e.Token != 0 {
		s += fmt.Sprintf(" %d", e.Token)
	}
	if e.Reason != "" {
		s += " " + e.Reason
	}
	return s
}

func lines(evs []api.WatchEvent) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = line(e)
	}
	return out
}

// readAll pages through every event after after (limit per page), with
// no wait, and answers them and the last revision.
func (ts *testServer) readAll(after string, limit int, extra ...string) ([]api.WatchEvent, string) {
	ts.t.Helper()
	all, rev, ok := ts.tryReadAll(after, limit, extra...)
	if !ok {
		ts.t.Fatalf("watch after %s: not answered", after)
	}
	return all, rev
}

// tryReadAll is readAll on a node that may answer 503 (a follower in an
// election): ok is false then.
func (ts *testServer) tryReadAll(after string, limit int, extra ...string) ([]api.WatchEvent, string, bool) {
	ts.t.Helper()
	var all []api.WatchEvent
	for range 10000 {
		qs := q(append([]string{"after", after, "wait_ms", "0", "limit", fmt.Sprint(limit)}, extra...)...)
		w := ts.watch(qs)
		if w.status == 503 {
			ts.t.Logf("watch after %s: %d %+v", after, w.status, w.err)
			return nil, "", false
		}
		if w.status != 200 {
			ts.t.Fatalf("watch after %s: %d %+v", after, w.status, w.err)
		}
		all = append(all, w.resp.Events...)
		if w.resp.Revision.Compare(mustRev(ts.t, after)) < 0 {
			ts.t.Fatalf("revision went back from %s to %s", after, w.resp.Revision)
		}
		after = w.resp.Revision.String()
		if len(w.resp.Events) < limit {
			return all, after, true
		}
	}
	ts.t.Fatal("too many pages")
	return nil, "", false
}

func mustRev(t *testing.T, s string) api.Revision {
	t.Helper()
	r, err := api.ParseRevision(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// everyKind makes one event of each kind on w/k, on the fake clock:
// granted, wait-joined, released and granted (hand-off, one entry),
// wait-left (deadline), wait-left (cancelled), expired.
func everyKind(t *testing.T, ts *testServer, fake *clock.Fake) {
	t.Helper()
	ts.post(api.PathAcquire, `{"key":"w/k","holder":"a","ttl_ms":10000}`)
	got := make(chan answer, 1)
	go func() {
		got <- ts.do(context.Background(), "POST", api.PathAcquire, `{"key":"w/k","holder":"b","ttl_ms":5000,"wait_ms":60000}`)
	}()
	eventually(t, "b queued", func() bool { return ts.queued("w/k", "b") })
	ts.post(api.PathRelease, `{"key":"w/k","holder":"a"}`)
	if a := <-got; a.status != 200 {
		t.Fatalf("b: %d %v", a.status, a.body)
	}
	go func() {
		got <- ts.do(context.Background(), "POST", api.PathAcquire, `{"key":"w/k","holder":"c","ttl_ms":5000,"wait_ms":100}`)
	}()
	eventually(t, "c queued", func() bool { return ts.queued("w/k", "c") })
	fake.Advance(100 * time.Millisecond)
	if a := <-got; a.status != 409 {
		t.Fatalf("c: %d %v", a.status, a.body)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		got <- ts.do(ctx, "POST", api.PathAcquire, `{"key":"w/k","holder":"d","ttl_ms":5000,"wait_ms":60000}`)
	}()
	eventually(t, "d queued", func() bool { return ts.queued("w/k", "d") })
	cancel()
	<-got
	eventually(t, "d gone", func() bool { return !ts.queued("w/k", "d") })
	fake.Advance(5 * time.Second)
	eventually(t, "b expired", func() bool { _, ok := ts.fsm.Get("w/k", ts.fsm.Now()); return !ok })
}

func TestWatchLongPollReportsEveryKindInOrder(t *testing.T) {
	ts, fake := fakeClockServer(t)
	start := ts.watch(q("wait_ms", "0"))
	if start.status != 200 || len(start.resp.Events) != 0 {
		t.Fatalf("watch from now: %+v", start)
	}
	everyKind(t, ts, fake)
	ts.post(api.PathAcquire, `{"key":"other","holder":"z","ttl_ms":10000}`)
	evs, _ := ts.readAll(start.resp.Revision.String(), 100, "prefix", "w/")
	var kinds []string
	for i, e := range evs {
		kinds = append(kinds, e.Type+":"+e.Holder+":"+e.Reason)
		if i > 0 && e.Revision.Compare(evs[i-1].Revision) <= 0 {
			t.Fatalf("revisions not increasing: %v", lines(evs))
		}
	}
	want := "granted:a: wait-joined:b: released:a: granted:b: wait-joined:c: wait-left:c:deadline wait-joined:d: wait-left:d:cancelled expired:b:"
	if strings.Join(kinds, " ") != want {
		t.Fatalf("events:\n got %s\nwant %s", strings.Join(kinds, " "), want)
	}
	// The hand-off is one entry: release and grant share an index.
	if evs[2].Revision.Index != evs[3].Revision.Index || evs[3].Revision.Seq != evs[2].Revision.Seq+1 {
		t.Fatalf("release and hand-off: %s, %s", evs[2].Revision, evs[3].Revision)
	}
	if evs[3].TTLMs != 5000 || evs[3].Token != 2 {
		t.Fatalf("hand-off grant: %+v", evs[3])
	}
	// key= watches one key: "other" is not under w/ and not w/k.
	one, _ := ts.readAll(start.resp.Revision.String(), 100, "key", "w/k")
	if fmt.Sprint(lines(one)) != fmt.Sprint(lines(evs)) {
		t.Fatalf("key=w/k: %v, prefix w/: %v", lines(one), lines(evs))
	}
	all, _ := ts.readAll(start.resp.Revision.String(), 100)
	if len(all) != len(evs)+1 || all[len(all)-1].Key != "other" {
		t.Fatalf("all keys: %v", lines(all))
	}
}

// Reading page by page, with pages cut inside an entry's events, gives
// exactly what one read gives: nothing skipped, nothing twice.
func TestWatchResumeMissesNothingAndRepeatsNothing(t *testing.T) {
	ts, fake := fakeClockServer(t)
	everyKind(t, ts, fake)
	for i := range 5 {
		ts.post(api.PathAcquire, fmt.Sprintf(`{"key":"w/%d","holder":"h","ttl_ms":1000}`, i))
	}
	before := ts.Revision().String()
	fake.Advance(time.Second) // five expiries in one tick entry
	eventually(t, "the expiries", func() bool { evs, _ := ts.readAll(before, 10); return len(evs) == 5 })
	whole, end := ts.readAll("0", api.MaxWatchLimit)
	for _, limit := range []int{1, 2, 3} {
		paged, pend := ts.readAll("0", limit)
		if fmt.Sprint(lines(paged)) != fmt.Sprint(lines(whole)) || pend != end {
			t.Fatalf("limit %d:\n%v\nwant\n%v", limit, lines(paged), lines(whole))
		}
	}
	// Resuming after any event answers exactly the ones after it.
	for i, e := range whole {
		rest, _ := ts.readAll(e.Revision.String(), api.MaxWatchLimit)
		if fmt.Sprint(lines(rest)) != fmt.Sprint(lines(whole[i+1:])) {
			t.Fatalf("after %s: %v, want %v", e.Revision, lines(rest), lines(whole[i+1:]))
		}
	}
	if len(whole) < 14 {
		t.Fatalf("only %d events", len(whole))
	}
}

func TestWatchLongPollWaitsForAnEventOrItsWait(t *testing.T) {
	ts, fake := fakeClockServer(t)
	now := ts.watch(q("wait_ms", "0")).resp.Revision.String()
	got := make(chan watchReply, 1)
	go func() { got <- ts.watch(q("prefix", "a/", "after", now, "wait_ms", "60000")) }()
	eventually(t, "the watch to wait", func() bool { return testWatchers(ts.Server) == 1 })
	// An event on another key moves the watcher, but does not answer it.
	ts.post(api.PathAcquire, `{"key":"b/x","holder":"h","ttl_ms":3600000}`)
	ts.post(api.PathAcquire, `{"key":"a/x","holder":"h","ttl_ms":3600000}`)
	w := <-got
	if w.status != 200 || len(w.resp.Events) != 1 || w.resp.Events[0].Key != "a/x" || w.resp.Events[0].Token != 2 {
		t.Fatalf("woken: %+v", w)
	}
	// Nothing comes: the wait (on the server's clock) ends it, empty, at
	// a revision past the other key's events.
	go func() { got <- ts.watch(q("prefix", "a/", "after", w.resp.Revision.String(), "wait_ms", "60000")) }()
	eventually(t, "the watch to wait", func() bool { return testWatchers(ts.Server) == 1 })
	ts.post(api.PathAcquire, `{"key":"b/y","holder":"h","ttl_ms":3600000}`)
	eventually(t, "b/y seen", func() bool { return ts.Revision().Compare(w.resp.Revision) > 0 })
	fake.Advance(time.Minute)
	w2 := <-got
	if w2.status != 200 || len(w2.resp.Events) != 0 || w2.resp.Revision.Compare(ts.Revision()) != 0 {
		t.Fatalf("ran out: %+v, now %s", w2, ts.Revision())
	}
	if testWatchers(ts.Server) != 0 {
		t.Fatal("a finished watch is still counted")
	}
}

func testWatchers(s *Server) int { return int(s.metric("fencelock_watchers")) }

func TestWatchCompactedNamesTheOldestRevision(t *testing.T) {
	fake := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	cfg := fastConfig("")
	cfg.Clock, cfg.MinTickInterval, cfg.WatchHistory = fake, time.Nanosecond, 4
	ts := startServer(t, cfg)
	for i := range 6 {
		ts.post(api.PathAcquire, fmt.Sprintf(`{"key":"k%d","holder":"h","ttl_ms":60000}`, i))
	}
	w := ts.watch(q("after", "0", "wait_ms", "0"))
	if w.status != 410 || w.err.Code != api.CodeCompacted || w.err.CompactRevision == nil {
		t.Fatalf("old revision: %+v", w)
	}
	rest, _ := ts.readAll(w.err.CompactRevision.String(), 10)
	if len(rest) != 4 || rest[0].Key != "k2" || rest[3].Key != "k5" {
		t.Fatalf("after the compact revision: %v", lines(rest))
	}
	// The list answers the present, at a revision a watch may start after.
	l := ts.watch(q("list", "true"))
	if l.status != 200 || len(l.resp.Locks) != 6 || l.resp.Revision.Seq != api.EndOfEntry {
		t.Fatalf("list: %+v", l)
	}
	ts.post(api.PathAcquire, `{"key":"k9","holder":"h","ttl_ms":60000}`)
	after, _ := ts.readAll(l.resp.Revision.String(), 10)
	if len(after) != 1 || after[0].Key != "k9" {
		t.Fatalf("after the list: %v", lines(after))
	}
}

func TestWatchRefusesBadQueries(t *testing.T) {
	ts := startServer(t, fastConfig(""))
	for _, c := range []struct {
		q     url.Values
		field string
	}{
		{q("after", "x"), "after"},
		{q("after", "1.2.3"), "after"},
		{q("after", "-1"), "after"},
		{q("wait_ms", "-1"), "wait_ms"},
		{q("wait_ms", "300001"), "wait_ms"},
		{q("wait_ms", "soon"), "wait_ms"},
		{q("limit", "0"), "limit"},
		{q("limit", "1001"), "limit"},
		{q("key", "a", "prefix", "b"), "key"},
		{q("key", strings.Repeat("k", 1025)), "key"},
		{q("prefix", strings.Repeat("k", 1025)), "prefix"},
		{q("list", "maybe"), "list"},
		{q("list", "true", "after", "3"), "after"},
	} {
		w := ts.watch(c.q)
		if w.status != 400 || w.err.Field != c.field {
			t.Errorf("%v: %d %+v, want 400 on %s", c.q, w.status, w.err, c.field)
		}
	}
	if w := ts.watch(q("wait_ms", "0")); w.status != 200 {
		t.Fatalf("good query: %+v", w)
	}
}

func TestWatchLimitsOpenWatches(t *testing.T) {
	fake := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	cfg := fastConfig("")
	cfg.Clock, cfg.WatchMaxPerCaller, cfg.WatchMaxWatchers = fake, 2, 3
	ts := startServer(t, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan watchReply, 3)
	for range 2 {
		go func() { done <- ts.watchCtx(ctx, q("wait_ms", "60000")) }()
	}
	eventually(t, "two watches", func() bool { return testWatchers(ts.Server) == 2 })
	w := ts.watch(q("wait_ms", "0"))
	if w.status != 429 || w.err.Code != api.CodeTooManyWatchers || !strings.Contains(w.err.Message, "per caller") {
		t.Fatalf("third from one host: %+v", w)
	}
	// The total counts every caller: the in-process one is another.
	if _, err := ts.Watch(ctx, api.WatchRequest{}, service.WatchScope{}); err != nil {
		t.Fatalf("in-process: %v", err)
	}
	go func() {
		_, _ = ts.Watch(ctx, api.WatchRequest{WaitMs: 60000}, service.WatchScope{})
		done <- watchReply{}
	}()
	eventually(t, "three watches", func() bool { return testWatchers(ts.Server) == 3 })
	if _, err := ts.Watch(ctx, api.WatchRequest{}, service.WatchScope{}); err == nil || !strings.Contains(err.Error(), "its limit") {
		t.Fatalf("fourth in all: %v", err)
	}
	cancel()
	for range 3 {
		<-done
	}
	eventually(t, "none open", func() bool { return testWatchers(ts.Server) == 0 })
}

// The framed protocol carries the long-poll as it carries any GET.
func TestWatchLongPollOverFrames(t *testing.T) {
	fake := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	cfg := fastConfig("")
	cfg.Clock = fake
	ln := listen(t)
	cfg.ClientAddr = ln.Addr().String()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: s.Handler()}
	fs := &framing.Server{Handler: s.Handler()}
	go hs.Serve(framing.Listen(ln, fs))
	defer func() {
		s.BeginShutdown()
		hs.Close()
		fs.Close()
		s.Close()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	fc, err := framing.Dial(ctx, ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer fc.Close()
	type result struct {
		status int
		body   []byte
		err    error
	}
	got := make(chan result, 1)
	go func() {
		st, body, err := fc.RoundTrip(ctx, http.MethodGet, watchURL(q("prefix", "f/", "wait_ms", "60000")), nil)
		got <- result{st, body, err}
	}()
	eventually(t, "the framed watch to wait", func() bool { return testWatchers(s) == 1 })
	st, body, err := fc.RoundTrip(ctx, http.MethodPost, api.PathAcquire, []byte(`{"key":"f/1","holder":"h","ttl_ms":60000}`))
	if err != nil || st != 200 {
		t.Fatalf("framed acquire: %d %s %v", st, body, err)
	}
	r := <-got
	var resp api.WatchResponse
	if r.err != nil || r.status != 200 || json.Unmarshal(r.body, &resp) != nil || len(resp.Events) != 1 || resp.Events[0].Key != "f/1" {
		t.Fatalf("framed watch: %d %s %v", r.status, r.body, r.err)
	}
}

// sseFrame is one server-sent event.
type sseFrame struct{ id, event, data string }

func readSSE(t *testing.T, br *bufio.Reader) sseFrame {
	t.Helper()
	var f sseFrame
	for {
		l, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the stream: %v (so far %+v)", err, f)
		}
		l = strings.TrimRight(l, "\n")
		switch {
		case l == "":
			return f
		case strings.HasPrefix(l, "id: "):
			f.id = l[4:]
		case strings.HasPrefix(l, "event: "):
			f.event = l[7:]
		case strings.HasPrefix(l, "data: "):
			f.data = l[6:]
		}
	}
}

func openSSE(t *testing.T, ctx context.Context, ts *testServer, qs url.Values, lastID string) (*http.Response, *bufio.Reader) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, ts.url+watchURL(qs), nil)
	req.Header.Set("Accept", api.ContentTypeEventStream)
	if lastID != "" {
		req.Header.Set(api.HeaderLastEventID, lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp, bufio.NewReader(resp.Body)
}

func TestWatchEventStream(t *testing.T) {
	ts, fake := fakeClockServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp, br := openSSE(t, ctx, ts, q("prefix", "s/"), "")
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != api.ContentTypeEventStream {
		t.Fatalf("stream: %s %v", resp.Status, resp.Header)
	}
	first := readSSE(t, br)
	if first.event != api.SSEProgress {
		t.Fatalf("first frame: %+v", first)
	}
	ts.post(api.PathAcquire, `{"key":"x/1","holder":"h","ttl_ms":60000}`)
	ts.post(api.PathAcquire, `{"key":"s/1","holder":"h","ttl_ms":60000}`)
	f := readSSE(t, br)
	var ev api.WatchEvent
	if f.event != api.WatchGranted || json.Unmarshal([]byte(f.data), &ev) != nil || ev.Key != "s/1" || ev.Revision.String() != f.id {
		t.Fatalf("event frame: %+v", f)
	}
	// With nothing to send, a progress frame moves the id past other keys.
	ts.post(api.PathAcquire, `{"key":"x/2","holder":"h","ttl_ms":60000}`)
	eventually(t, "x/2 seen", func() bool { return ts.Revision().Compare(ev.Revision) > 0 })
	fake.Advance(service.StreamProgress)
	p := readSSE(t, br)
	if p.event != api.SSEProgress || p.id != ts.Revision().String() {
		t.Fatalf("progress: %+v, now %s", p, ts.Revision())
	}
	cancel()
	// A reconnect with Last-Event-ID resumes after it.
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	_, br2 := openSSE(t, ctx2, ts, q("prefix", "s/"), first.id)
	readSSE(t, br2) // progress at the resume point
	again := readSSE(t, br2)
	if again.id != f.id {
		t.Fatalf("resumed at %s, want the event %s", again.id, f.id)
	}
}

func TestWatchEventStreamEndsCompacted(t *testing.T) {
	cfg := fastConfig("")
	cfg.WatchHistory = 2
	ts := startServer(t, cfg)
	for i := range 4 {
		ts.post(api.PathAcquire, fmt.Sprintf(`{"key":"k%d","holder":"h","ttl_ms":60000}`, i))
	}
	_, br := openSSE(t, context.Background(), ts, q("after", "0"), "")
	readSSE(t, br)
	f := readSSE(t, br)
	var e api.Error
	if f.event != api.SSEError || json.Unmarshal([]byte(f.data), &e) != nil || e.Code != api.CodeCompacted || e.CompactRevision == nil {
		t.Fatalf("lagging stream: %+v", f)
	}
	if _, err := br.ReadString('\n'); err != io.EOF {
		t.Fatalf("the stream goes on after its error: %v", err)
	}
}

// Every node numbers the same events the same way, so a watcher may
// resume on any of them; a follower answers from what it has applied.
func TestWatchRevisionsAreTheSameOnEveryNode(t *testing.T) {
	c := startCluster(t, 3, nil)
	must := func(a answer, what string) {
		t.Helper()
		if a.status != 200 {
			t.Fatalf("%s: %d %v", what, a.status, a.body)
		}
	}
	// Whichever node leads is asked (a loaded machine may elect again),
	// and every write is checked.
	for i := range 4 {
		must(c.post(api.PathAcquire, acquireBody(fmt.Sprintf("c/%d", i), "a", 200, fmt.Sprint("c", i))), "acquire") // they expire by ticks
	}
	must(c.post(api.PathAcquire, acquireBody("c/h", "a", 60000, "ch")), "acquire c/h")
	l := c.leader()
	got := make(chan answer, 1)
	go func() {
		got <- l.do(context.Background(), "POST", api.PathAcquire, `{"key":"c/h","holder":"b","ttl_ms":60000,"wait_ms":60000,"request_id":"b"}`)
	}()
	eventually(t, "b queued", func() bool { return l.queued("c/h", "b") })
	must(c.post(api.PathRelease, `{"key":"c/h","holder":"a"}`), "release")
	if a := <-got; a.status != 200 {
		// Its leader changed while it waited: the same request to the
		// new leader keeps its place, and its grant.
		must(c.post(api.PathAcquire, `{"key":"c/h","holder":"b","ttl_ms":60000,"wait_ms":60000,"request_id":"b"}`), "b's wait, sent again")
	}
	// A node in an election answers 503 for a while: each read is made
	// again until it is answered.
	var (
		want []api.WatchEvent
		end  string
	)
	eventually(t, "the expiries", func() bool {
		l = c.leader()
		evs, _, ok := l.tryReadAll("0", 100, "prefix", "c/")
		if ok && len(evs) == 12 {
			want, end, ok = l.tryReadAll("0", 100)
			return ok
		}
		return false
	})
	for _, n := range c.others(l) {
		eventually(t, n.id+" to apply as far", func() bool { return n.Revision().Compare(mustRev(t, end)) >= 0 })
		var evs []api.WatchEvent
		eventually(t, n.id+"'s events", func() bool { e, _, ok := n.tryReadAll("0", 3); evs = e; return ok })
		if len(evs) < len(want) || fmt.Sprint(lines(evs[:len(want)])) != fmt.Sprint(lines(want)) {
			t.Fatalf("%s:\n%v\nleader %s:\n%v", n.id, lines(evs), l.id, lines(want))
		}
	}
	// Resume on a follower from the middle of the leader's sequence.
	f := c.others(l)[0]
	mid := want[len(want)/2].Revision.String()
	var rest []api.WatchEvent
	eventually(t, f.id+"'s events after "+mid, func() bool { e, _, ok := f.tryReadAll(mid, 100); rest = e; return ok })
	if fmt.Sprint(lines(rest[:len(want)-len(want)/2-1])) != fmt.Sprint(lines(want[len(want)/2+1:])) {
		t.Fatalf("resumed on %s after %s: %v", f.id, mid, lines(rest))
	}
}

// A node that installs a snapshot does not know the events before it: a
// watch from before is compacted there and names the snapshot's index.
func TestWatchAfterASnapshotInstallIsCompacted(t *testing.T) {
	c := startCluster(t, 3, func(cfg *Config) {
		cfg.TrailingLogs = 5
		cfg.SnapshotThreshold = 20
	})
	l := c.leader()
	lag := c.others(l)[0]
	l.post(api.PathAcquire, acquireBody("first", "h", 60000, ""))
	eventually(t, "the lagging node has the first", func() bool { return lag.fsm.LastToken() == 1 })
	seen := lag.Revision()
	c.isolate(lag)
	for i := range 40 {
		l.post(api.PathAcquire, acquireBody(fmt.Sprintf("k%d", i), "h", 60000, ""))
	}
	if err := l.snapshotter(t).Snapshot(); err != nil {
		t.Fatal(err)
	}
	c.heal()
	eventually(t, "the lagging node to install the snapshot", func() bool { return lag.fsm.LastToken() == 41 })
	w := lag.watch(q("after", seen.String(), "wait_ms", "0"))
	if w.status != 410 || w.err.CompactRevision == nil || w.err.CompactRevision.Seq != api.EndOfEntry {
		t.Fatalf("on the node that installed a snapshot: %+v", w)
	}
	// The leader still has them all.
	evs, _ := l.readAll(seen.String(), 100)
	if len(evs) != 40 {
		t.Fatalf("leader after %s: %d events", seen, len(evs))
	}
	// From the snapshot on, both number the same events the same way.
	from := w.err.CompactRevision.String()
	l.post(api.PathAcquire, acquireBody("later", "h", 60000, ""))
	want, end := l.readAll(from, 100)
	eventually(t, "the lagging node to apply later", func() bool { return lag.Revision().Compare(mustRev(t, end)) >= 0 })
	got, _ := lag.readAll(from, 100)
	if len(want) == 0 || fmt.Sprint(lines(got)) != fmt.Sprint(lines(want)) {
		t.Fatalf("after %s: lagging node %v, leader %v", from, lines(got), lines(want))
	}
}

// Under ACLs a watch needs read on its prefix, and leaves out the keys
// below it the caller may not read, as a list does.
func TestWatchUnderACLsNeedsReadAndHidesDeniedKeys(t *testing.T) {
	ts := startServer(t, fastConfig(""))
	admin := ts.bootstrap()
	ops := ts.token(admin, "ops", "jobs/:read", "jobs/secret/:read:deny")
	for _, k := range []string{"jobs/a", "jobs/secret/b", "other/c"} {
		if a := ts.authDo("POST", api.PathAcquire, acquireBody(k, "admin", 60000, ""), admin); a.status != 200 {
			t.Fatalf("acquire %s: %v", k, a.body)
		}
	}
	if a := ts.authDo("GET", watchURL(q("prefix", "other/", "after", "0", "wait_ms", "0")), "", ops); a.status != 403 {
		t.Fatalf("watch other/: %d %v", a.status, a.body)
	}
	if a := ts.authDo("GET", watchURL(q("after", "0", "wait_ms", "0")), "", ""); a.status != 401 {
		t.Fatalf("watch without a token: %d %v", a.status, a.body)
	}
	a := ts.authDo("GET", watchURL(q("prefix", "jobs/", "after", "0", "wait_ms", "0")), "", ops)
	evs, _ := a.body["events"].([]any)
	if a.status != 200 || len(evs) != 1 || evs[0].(map[string]any)["key"] != "jobs/a" || evs[0].(map[string]any)["holder"] != "admin" {
		t.Fatalf("watch jobs/: %d %v", a.status, a.body)
	}
	l := ts.authDo("GET", watchURL(q("prefix", "jobs/", "list", "true")), "", ops)
	locks, _ := l.body["locks"].([]any)
	if l.status != 200 || len(locks) != 1 {
		t.Fatalf("list jobs/: %d %v", l.status, l.body)
	}
}

// A stream whose consumer stops reading is cut off once the connection
// takes no bytes for its write timeout; the server holds no buffer for it
// meanwhile (the stream reads the shared history, which is bounded).
func TestWatchEventStreamDropsAConsumerThatStopsReading(t *testing.T) {
	if testing.Short() {
		t.Skip("full tier: floods the history until a write times out (go test without -short)")
	}
	cfg := fastConfig("")
	cfg.sseWriteTimeout = 100 * time.Millisecond
	cfg.WatchHistory = maxWatchHistory // so that only the write timeout can end it
	ts := startServer(t, cfg)
	openSSE(t, context.Background(), ts, q("prefix", ""), "") // never read
	eventually(t, "the stream to open", func() bool { return testWatchers(ts.Server) == 1 })
	key := strings.Repeat("k", 1000)
	for i := 0; testWatchers(ts.Server) == 1; i++ {
		if i == 40000 {
			t.Fatal("a consumer that reads nothing was never cut off")
		}
		ts.post(api.PathAcquire, fmt.Sprintf(`{"key":"%s%d","holder":"h","ttl_ms":60000}`, key[:1000-len(fmt.Sprint(i))], i))
	}
}
