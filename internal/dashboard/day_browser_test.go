package dashboard_test

// The day so far: what the page shows on load (the events the server
// still keeps, the sessions, every queued waiter) rather than only what
// happens while it is open.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/server"
)

// waitQueued returns once the server has n waiters queued in all.
func (ts *testServer) waitQueued(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		var o api.Overview
		if st := ts.call(context.Background(), t, "GET", api.PathOverview, "", nil, &o); st == 200 && o.Queued == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server never had %d waiters queued", n)
		}
		time.Sleep(10 * time.Millisecond) // polling the server's state, not deciding anything
	}
}

// waiter queues holder's acquire of req.Key in the background until the
// test ends (or it is granted).
func (ts *testServer) waiter(t *testing.T, req api.AcquireRequest) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		ts.call(ctx, t, "POST", api.PathAcquire, "", req, nil)
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })
}

// eventsJS lists the events pane, newest first, as "kind key".
const eventsJS = `[...document.querySelectorAll('#events li')].map(li => li.dataset.kind + ' ' + li.dataset.key)`

// TestDashboardBackfillsEvents: a page opened after the changes shows
// them, from the server's watch history, in the order they were made and
// told as they would have been live (the hand-off names whom it came
// from), and then goes on live without repeating one; a new prefix
// replaces them with its own history.
func TestDashboardBackfillsEvents(t *testing.T) {
	ctx := browser(t, 1280, 900, time.Minute)
	ts := startServer(t)
	ts.acquire(t, "other/x", "dave", 30*time.Second, "")
	ts.acquire(t, "jobs/a", "alice", 30*time.Second, "")
	ts.waiter(t, api.AcquireRequest{Key: "jobs/a", Holder: "bob", TTLMs: 30000, WaitMs: 30000})
	ts.waitQueued(t, 1)
	ts.release(t, "jobs/a", "alice", "")
	ts.waitQueued(t, 0)
	ts.release(t, "jobs/a", "bob", "")
	ts.acquire(t, "jobs/b", "carol", 30*time.Second, "")

	open(ctx, t, ts.url+"/ui/?poll=200")
	want := []string{"granted jobs/b", "released jobs/a", "handoff jobs/a", "released jobs/a", "queued jobs/a", "granted jobs/a", "granted other/x"}
	wait[bool](ctx, t, "the history in the events pane", eventsJS+`.length >= 7`)
	if got := wait[[]string](ctx, t, "the events", eventsJS); !slices.Equal(got, want) {
		t.Errorf("events on load, newest first: %q, want %q", got, want)
	}
	from := wait[string](ctx, t, "the hand-off's text", `document.querySelector('#events li[data-kind="handoff"] .what').textContent`)
	if !strings.Contains(from, "bob from alice") {
		t.Errorf("the hand-off says %q; it came from alice", from)
	}
	if src := wait[string](ctx, t, "the events' source", `document.getElementById('events-source').textContent`); src != "live, from the watch" {
		t.Errorf("the events' source says %q", src)
	}

	ts.release(t, "jobs/b", "carol", "")
	wait[bool](ctx, t, "the live release", `document.querySelector('#events li').dataset.kind === 'released' && document.querySelector('#events li').dataset.key === 'jobs/b'`)
	want = append([]string{"released jobs/b"}, want...)
	if got := wait[[]string](ctx, t, "the events", eventsJS); !slices.Equal(got, want) {
		t.Errorf("events after a live one, newest first: %q", got)
	}

	if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.ID("prefix"), "jobs/")); err != nil {
		t.Fatal(err)
	}
	want = want[:len(want)-1]
	wait[bool](ctx, t, "other/x to leave the pane", `!document.querySelector('#events li[data-key="other/x"]') && document.querySelectorAll('#events li').length > 0`)
	if got := wait[[]string](ctx, t, "the events under jobs/", eventsJS); !slices.Equal(got, want) {
		t.Errorf("events under jobs/, newest first: %q, want %q", got, want)
	}
	noProblems(ctx, t)
}

// TestDashboardBackfillsTheLatestEvents: with more history than the pane
// holds, the page shows the latest events (not the oldest), and with a
// history shorter than the server's life, it starts where the history
// does without complaint.
func TestDashboardBackfillsTheLatestEvents(t *testing.T) {
	ctx := browser(t, 1280, 900, time.Minute)
	ts := startServerWith(t, func(c *server.Config) { c.WatchHistory = 150 })
	var last api.Lease
	for i := range 120 { // 240 events: past both the history and the pane
		last = ts.acquire(t, fmt.Sprintf("batch/%03d", i), "worker", 30*time.Second, "")
		ts.release(t, last.Key, "worker", "")
	}
	open(ctx, t, ts.url+"/ui/?poll=200")
	wait[bool](ctx, t, "a full events pane", `document.querySelectorAll('#events li').length === 80`)
	got := wait[[]string](ctx, t, "the events", eventsJS)
	if got[0] != "released batch/119" || got[1] != "granted batch/119" || got[79] != "granted batch/080" {
		t.Errorf("the pane shows %q .. %q, want the latest 80 (released batch/119 .. granted batch/080)", got[:2], got[78:])
	}
	if tok := wait[string](ctx, t, "the newest grant's token", `document.querySelector('#events li[data-kind="granted"] .tok').textContent`); tok != fmt.Sprintf("#%d", last.Token) {
		t.Errorf("the newest grant shows %s, want #%d", tok, last.Token)
	}
	noProblems(ctx, t)
}

// TestDashboardShowsSessions: a session's holder, its locks and its time
// left, counting down; closed, it leaves the panel with its locks.
func TestDashboardShowsSessions(t *testing.T) {
	ctx := browser(t, 1280, 900, time.Minute)
	ts := startServer(t)
	var ss api.Session
	if st := ts.call(context.Background(), t, "POST", api.PathSessionOpen, "", api.SessionOpenRequest{Holder: "deployer", TTLMs: 20000}, &ss); st != 200 {
		t.Fatalf("session open: %d", st)
	}
	for _, k := range []string{"deploy/web", "deploy/db"} {
		if st := ts.call(context.Background(), t, "POST", api.PathAcquire, "", api.AcquireRequest{Key: k, Holder: "deployer", Session: ss.ID}, nil); st != 200 {
			t.Fatalf("acquire %s under the session: %d", k, st)
		}
	}
	ts.acquire(t, "jobs/solo", "alice", 30*time.Second, "") // no session: not in the panel

	open(ctx, t, ts.url+"/ui/?poll=200")
	r := fmt.Sprintf(`document.querySelector('#sessions-body tr[data-session="%d"]')`, ss.ID)
	got := wait[string](ctx, t, "the session's row", r+` && `+r+`.querySelector('.holder').textContent + ' | ' + `+r+`.querySelector('.keys').textContent`)
	if got != "deployer | deploy/db deploy/web" {
		t.Errorf("the session's row says %q", got)
	}
	ms := r + `.querySelector('.ttl-text').dataset.ms`
	first := wait[float64](ctx, t, "the session's time left", `Number(`+ms+`) > 0 && Number(`+ms+`)`)
	if first > 20000 {
		t.Errorf("the session has %v ms left, above its TTL", first)
	}
	wait[bool](ctx, t, "the session's countdown", fmt.Sprintf(`Number(%s) < %v`, ms, first-300))
	if n := wait[float64](ctx, t, "the sessions", `document.querySelectorAll('#sessions-body tr[data-session]').length`); n != 1 {
		t.Errorf("%v sessions listed, want 1", n)
	}
	if sum := wait[string](ctx, t, "the sessions' count", `document.getElementById('sessions-sum').textContent`); sum != "1 open" {
		t.Errorf("the sessions' count says %q", sum)
	}

	if st := ts.call(context.Background(), t, "POST", api.PathSessionClose, "", api.SessionRequest{ID: ss.ID, Holder: "deployer"}, nil); st != 200 {
		t.Fatalf("session close: %d", st)
	}
	wait[bool](ctx, t, "the session and its locks to go", `!`+r+` && !`+row("deploy/web")+` && !`+row("deploy/db")+` && !!`+row("jobs/solo"))
	wait[bool](ctx, t, "the empty sessions panel", `!document.getElementById('sessions-empty').hidden`)
	noProblems(ctx, t)
}

// TestDashboardShowsEveryWaiter: waiters queued on an exclusive lock, a
// semaphore and a read/write lock. The Waiting tile counts the waiters it
// lists (and says how many are queued in all when that differs), and the
// wait chart shows the waits under way instead of "Nobody has waited
// yet".
func TestDashboardShowsEveryWaiter(t *testing.T) {
	ctx := browser(t, 1280, 900, time.Minute)
	ts := startServer(t)
	ts.acquire(t, "jobs/x", "alice", time.Minute, "")
	if st := ts.call(context.Background(), t, "POST", api.PathAcquire, "", api.AcquireRequest{Key: "pool/gpu", Holder: "job-a", TTLMs: 60000, Permits: 1}, nil); st != 200 {
		t.Fatalf("semaphore: %d", st)
	}
	if st := ts.call(context.Background(), t, "POST", api.PathAcquire, "", api.AcquireRequest{Key: "docs/idx", Holder: "writer", TTLMs: 60000, Mode: api.ModeWrite}, nil); st != 200 {
		t.Fatalf("write lock: %d", st)
	}
	ts.waiter(t, api.AcquireRequest{Key: "jobs/x", Holder: "bob", TTLMs: 30000, WaitMs: 60000})
	ts.waitQueued(t, 1)
	ts.waiter(t, api.AcquireRequest{Key: "jobs/x", Holder: "carol", TTLMs: 30000, WaitMs: 60000})
	ts.waitQueued(t, 2)
	ts.waiter(t, api.AcquireRequest{Key: "pool/gpu", Holder: "job-b", TTLMs: 30000, WaitMs: 60000, Permits: 1})
	ts.waitQueued(t, 3)
	ts.waiter(t, api.AcquireRequest{Key: "docs/idx", Holder: "reader", TTLMs: 30000, WaitMs: 60000, Mode: api.ModeRead})
	ts.waitQueued(t, 4)
	var o api.Overview
	if st := ts.call(context.Background(), t, "GET", api.PathOverview, "", nil, &o); st != 200 {
		t.Fatalf("overview: %d", st)
	}
	listed := map[string]int{}
	for _, l := range o.Locks {
		listed[l.Key] = l.WaitersTotal
	}

	open(ctx, t, ts.url+"/ui/?poll=200")
	chips := func(key string) string {
		return `[...(` + row(key) + `?.querySelectorAll('.waiter') || [])].map(w => w.dataset.holder).join(' ')`
	}
	if got := wait[string](ctx, t, "jobs/x's waiters", chips("jobs/x")+` || false`); got != "bob carol" {
		t.Errorf("jobs/x's waiters: %q, want bob carol", got)
	}
	// The shared kinds' queues are listed once the server's overview
	// lists them; until then the tile says so.
	for key, holder := range map[string]string{"pool/gpu": "job-b", "docs/idx": "reader"} {
		if listed[key] == 0 {
			t.Logf("the server's overview lists no waiters on %s yet", key)
			continue
		}
		if got := wait[string](ctx, t, key+"'s waiters", chips(key)+` || false`); got != holder {
			t.Errorf("%s's waiters: %q, want %s", key, got, holder)
		}
	}
	shown := 0
	for _, n := range listed {
		shown += n
	}
	tile := wait[[]string](ctx, t, "the Waiting tile", `document.getElementById('stat-queued').textContent !== '–' && [document.getElementById('stat-queued').textContent, document.getElementById('stat-queued-sub').textContent, String(document.querySelectorAll('.waiter[data-holder]').length)]`)
	if tile[0] != fmt.Sprint(shown) || tile[2] != fmt.Sprint(shown) {
		t.Errorf("the Waiting tile says %s and the page lists %s waiters; the overview lists %d", tile[0], tile[2], shown)
	}
	if shown != 4 && !strings.Contains(tile[1], "4 queued in all") {
		t.Errorf("the Waiting tile's note is %q; 4 are queued in all", tile[1])
	}
	chart := wait[[]string](ctx, t, "the wait chart", `[document.getElementById('chart-wait').textContent, document.getElementById('wait-sum').textContent, String(document.querySelectorAll('#chart-wait rect.bar.now').length)]`)
	if strings.Contains(chart[0], "Nobody has waited yet") {
		t.Errorf("the wait chart says %q with 4 waiters queued", chart[0])
	}
	if !strings.Contains(chart[1], fmt.Sprintf("%d waiting now", shown)) || chart[2] == "0" {
		t.Errorf("the wait chart's summary is %q with %s bars of waits under way", chart[1], chart[2])
	}
	noProblems(ctx, t)
}
