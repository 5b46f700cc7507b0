package dashboard_test

// The dashboard in a real browser: headless Chromium (Debian's chromium
// package; .ci/deps installs it) driven by chromedp, against a real server
// started in-process on a free loopback port. Every wait is on a DOM
// condition with a bounded timeout; nothing sleeps to decide.
//
// -short skips them. Without Chromium they fail, saying how to get it,
// unless FENCELOCK_TEST_NO_BROWSER=1 is set (then they skip). FENCELOCK_CHROMIUM
// names another binary. `go test ./internal/dashboard -run
// TestDashboardScreenshot -update` rewrites docs/img/dashboard.png.

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/server"
)

var update = flag.Bool("update", false, "rewrite docs/img/dashboard.png from a scenario with locks, waiters and chart data")

// chromiumPath is where every browser test starts, so it is where -short
// skips them.
func chromiumPath(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("browser tier (starts headless Chromium): skipped by -short")
	}
	if os.Getenv("FENCELOCK_TEST_NO_BROWSER") == "1" {
		t.Skip("FENCELOCK_TEST_NO_BROWSER=1: the dashboard's browser tests are skipped")
	}
	if p := os.Getenv("FENCELOCK_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no Chromium on PATH: the dashboard's browser tests need Debian's chromium package " +
		"(bash .ci/deps installs it; FENCELOCK_CHROMIUM names another binary), " +
		"or FENCELOCK_TEST_NO_BROWSER=1 to skip them")
	return ""
}

// browser starts headless Chromium on a temporary profile (with extra
// options after the usual ones) and returns a tab whose context ends
// after timeout: a bound on the test's whole conversation with the
// browser.
func browser(t *testing.T, width, height int, timeout time.Duration, extra ...chromedp.ExecAllocatorOption) context.Context {
	t.Helper()
	path := chromiumPath(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(width, height),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.Flag("force-device-scale-factor", "1"),
	)
	opts = append(opts, extra...)
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium refuses to run as root with its sandbox
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	ctx, cancelTime := context.WithTimeout(ctx, timeout)
	t.Cleanup(func() { cancelTime(); cancelTab(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("starting Chromium (%s): %v", path, err)
	}
	return ctx
}

type testServer struct {
	*server.Server // nil for a server run by server.Serve
	url            string
	client         *http.Client // nil: http.DefaultClient
}

// startServer starts a single node in-process on a free loopback port,
// which it knows as its client address (the members table shows it).
func startServer(t *testing.T) *testServer { return startServerWith(t, nil) }

// startServerWith is startServer with tweak applied to its Config.
func startServerWith(t *testing.T, tweak func(*server.Config)) *testServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := server.Config{
		ClientAddr:         ln.Addr().String(),
		HeartbeatTimeout:   50 * time.Millisecond,
		ElectionTimeout:    50 * time.Millisecond,
		LeaderLeaseTimeout: 50 * time.Millisecond,
		Logger:             slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	if tweak != nil {
		tweak(&cfg)
	}
	s, err := server.New(cfg)
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.WaitReady(ctx); err != nil {
		ln.Close()
		s.Close()
		t.Fatalf("server never became ready: %v", err)
	}
	hs := httptest.NewUnstartedServer(s.Handler())
	hs.Listener.Close()
	hs.Listener = ln
	hs.Start()
	t.Cleanup(func() {
		s.BeginShutdown()
		hs.Close()
		if err := s.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return &testServer{Server: s, url: hs.URL}
}

// call sends one API request and decodes its answer into out (if not nil).
func (ts *testServer) call(ctx context.Context, t *testing.T, method, path, token string, in, out any) int {
	t.Helper()
	var body io.Reader
	if in != nil {
		b, _ := json.Marshal(in)
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, ts.url+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	hc := ts.client
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return 0
		}
		t.Errorf("%s %s: %v", method, path, err)
		return 0
	}
	defer resp.Body.Close()
	if out != nil && resp.StatusCode == 200 {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Errorf("%s %s: %v", method, path, err)
		}
	}
	return resp.StatusCode
}

func (ts *testServer) acquire(t *testing.T, key, holder string, ttl time.Duration, token string) api.Lease {
	t.Helper()
	var l api.Lease
	if st := ts.call(context.Background(), t, "POST", api.PathAcquire, token, api.AcquireRequest{Key: key, Holder: holder, TTLMs: api.Ms(ttl)}, &l); st != 200 {
		t.Fatalf("acquire %s as %s: %d", key, holder, st)
	}
	return l
}

func (ts *testServer) release(t *testing.T, key, holder, token string) {
	t.Helper()
	var r api.ReleaseResponse
	if st := ts.call(context.Background(), t, "POST", api.PathRelease, token, api.ReleaseRequest{Key: key, Holder: holder}, &r); st != 200 || !r.Released {
		t.Fatalf("release %s as %s: %d %+v", key, holder, st, r)
	}
}

// wait polls a JavaScript expression in the page until it is truthy and
// returns its value; the test fails, naming what it waited for, if the
// page never gets there.
func wait[T any](ctx context.Context, t *testing.T, what, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Poll[T](expr, chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(15*time.Second)))
	if err != nil {
		page, _ := chromedp.Run(context.WithoutCancel(ctx), chromedp.Evaluate[string](`document.body ? document.body.innerText.slice(0, 2000) : ""`))
		t.Fatalf("waiting for %s: %v\nthe page says:\n%s", what, err, page)
	}
	return v
}

// problemsJS runs in the page before its own script: it records every
// Content-Security-Policy violation, uncaught error and unhandled
// rejection, which noProblems then asserts there were none of.
const problemsJS = `window.__problems = [];
document.addEventListener('securitypolicyviolation', (e) => window.__problems.push('CSP refused ' + e.violatedDirective + ': ' + (e.blockedURI || 'inline')));
window.addEventListener('error', (e) => window.__problems.push('error: ' + e.message));
window.addEventListener('unhandledrejection', (e) => window.__problems.push('unhandled rejection: ' + e.reason));`

// open records the page's problems (problemsJS) and navigates to url.
func open(ctx context.Context, t *testing.T, url string) {
	t.Helper()
	addScript := func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
		_, err := cdp.Call(ctx, tg, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: problemsJS})
		return chromedp.Void{}, err
	}
	if err := chromedp.Do(ctx, addScript, chromedp.Navigate(url)); err != nil {
		t.Fatal(err)
	}
}

// noProblems fails the test if the page broke its CSP or threw.
func noProblems(ctx context.Context, t *testing.T) {
	t.Helper()
	ps, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`window.__problems`))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		t.Errorf("the page: %s", p)
	}
}

// row is JavaScript that finds the table row of key.
func row(key string) string {
	k, _ := json.Marshal(key)
	return fmt.Sprintf(`document.querySelector('tr.lock[data-key=' + JSON.stringify(%s) + ']')`, k)
}

// TestDashboardShowsLocksComeAndGo: a lock taken through the API appears
// with its holder and token, counts down, shows its waiter, passes to the
// waiter with a new token on release (a hand-off in the events), and
// disappears once released; one left to run out disappears as an expiry.
// The events come from the watch (GET /v1/watch), and, with ?watch=off
// (as with a server that has no watches), from what the polls see.
func TestDashboardShowsLocksComeAndGo(t *testing.T) {
	for _, mode := range []struct {
		name, query, source string
		events              []string // newest first
	}{
		{"watch", "", "live, from the watch", []string{
			"expired cache/warm", "released jobs/nightly", "granted cache/warm", "handoff jobs/nightly",
			"released jobs/nightly", "queued jobs/nightly", "granted jobs/nightly"}},
		{"polls", "&watch=off", "seen between polls", []string{
			"expired cache/warm", "released jobs/nightly", "granted cache/warm", "handoff jobs/nightly",
			"released jobs/nightly", "granted jobs/nightly"}},
	} {
		t.Run(mode.name, func(t *testing.T) { locksComeAndGo(t, mode.query, mode.source, mode.events) })
	}
}

func locksComeAndGo(t *testing.T, query, source string, events []string) {
	ctx := browser(t, 1280, 900, time.Minute)
	ts := startServer(t)
	open(ctx, t, ts.url+"/ui/?poll=200"+query)
	// Once the watch has its starting revision, no change can be missed.
	src, _ := json.Marshal(source)
	wait[bool](ctx, t, "the events' source", `document.getElementById('events-source').textContent === `+string(src))
	empty := wait[string](ctx, t, "the empty state", `!document.getElementById('empty').hidden && document.getElementById('empty').innerText`)
	if !strings.Contains(empty, "fencelock lock demo") || !strings.Contains(empty, "sleep 30") {
		t.Errorf("the empty state does not say how to take a lock: %q", empty)
	}

	l := ts.acquire(t, "jobs/nightly", "alice", 30*time.Second, "")
	r := row("jobs/nightly")
	got := wait[string](ctx, t, "jobs/nightly to appear", r+` && `+r+`.querySelector('.holder').textContent + ' ' + `+r+`.querySelector('.token').firstChild.textContent`)
	if want := fmt.Sprintf("alice %d", l.Token); got != want {
		t.Errorf("row shows %q, want %q", got, want)
	}
	ms := r + `.querySelector('.ttl-text').dataset.ms`
	first := wait[float64](ctx, t, "a countdown", `Number(`+ms+`) > 0 && Number(`+ms+`)`)
	if first > 30000 {
		t.Errorf("countdown starts at %v ms, above the TTL", first)
	}
	// It counts down between polls and across them.
	wait[bool](ctx, t, "the countdown to decrease by 500 ms", fmt.Sprintf(`Number(%s) < %v`, ms, first-500))
	if lt := wait[string](ctx, t, "the last token", `document.getElementById('stat-last-token').textContent === '1' && 'ok'`); lt != "ok" {
		t.Fatal(lt)
	}

	// A waiter shows in the row, then gets the lock by hand-off.
	wctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var handed api.Lease
	wg.Add(1)
	go func() {
		defer wg.Done()
		ts.call(wctx, t, "POST", api.PathAcquire, "", api.AcquireRequest{Key: "jobs/nightly", Holder: "bob", TTLMs: 30000, WaitMs: 20000}, &handed)
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })
	wait[bool](ctx, t, "bob in the queue", r+` && [...`+r+`.querySelectorAll('.waiter')].some(w => w.textContent.includes('bob'))`)
	ts.release(t, "jobs/nightly", "alice", "")
	wg.Wait()
	if handed.Holder != "bob" {
		t.Fatalf("bob's wait answered %+v", handed)
	}
	got = wait[string](ctx, t, "bob to hold jobs/nightly", r+` && `+r+`.querySelector('.holder').textContent === 'bob' && `+r+`.dataset.token`)
	if got != fmt.Sprint(handed.Token) {
		t.Errorf("bob's row has token %s, want %d", got, handed.Token)
	}
	wait[bool](ctx, t, "a hand-off event", `!!document.querySelector('#events li[data-kind="handoff"][data-key="jobs/nightly"]')`)

	// A lease left to run out disappears as an expiry, not a release.
	ts.acquire(t, "cache/warm", "warmer", 3*time.Second, "")
	wait[bool](ctx, t, "cache/warm to appear", `!!`+row("cache/warm"))

	ts.release(t, "jobs/nightly", "bob", "")
	wait[bool](ctx, t, "jobs/nightly to disappear", `!`+r)
	wait[bool](ctx, t, "a release event", `!!document.querySelector('#events li[data-kind="released"][data-key="jobs/nightly"]')`)
	wait[bool](ctx, t, "cache/warm to expire", `!`+row("cache/warm")+` && !!document.querySelector('#events li[data-kind="expired"][data-key="cache/warm"]')`)
	if kinds := wait[[]string](ctx, t, "the events", `[...document.querySelectorAll('#events li')].map(li => li.dataset.kind + ' ' + li.dataset.key)`); !slices.Equal(kinds, events) {
		t.Errorf("events, newest first: %q, want %q", kinds, events)
	}
	wait[bool](ctx, t, "the empty state again", `!document.getElementById('empty').hidden`)
	node := wait[string](ctx, t, "the cluster's members", `(() => { const r = document.querySelector('#members-body tr'); return r && r.querySelector('.role.leader') && r.dataset.node; })()`)
	if node == "" {
		t.Error("no leader in the members table")
	}
	noProblems(ctx, t)
}

// TestDashboardAsksForAToken: with ACLs on, the page asks for a token
// (its data calls are answered 401), refuses an unknown one, shows a 403
// for a token that may not read the prefix, and lists the locks it may
// read once the prefix is narrowed to them. The token is kept in
// sessionStorage, never localStorage.
func TestDashboardAsksForAToken(t *testing.T) {
	ctx := browser(t, 1280, 900, time.Minute)
	ts := startServer(t)
	var boot api.ACLSecret
	if st := ts.call(context.Background(), t, "POST", api.PathACLBootstrap, "", struct{}{}, &boot); st != 200 {
		t.Fatalf("bootstrap: %d", st)
	}
	admin := boot.Secret
	ts.acquire(t, "jobs/a", "admin/job", time.Minute, admin)
	ts.acquire(t, "ops/b", "admin/job", time.Minute, admin)
	rule := func(prefix string, verbs ...string) api.ACLRule { return api.ACLRule{Prefix: prefix, Verbs: verbs} }
	if st := ts.call(context.Background(), t, "POST", api.PathACLPolicySet, admin, api.ACLPolicy{Name: "jobs-read", Rules: []api.ACLRule{rule("jobs/", "read")}}, nil); st != 200 {
		t.Fatalf("policy set: %d", st)
	}
	var viewer api.ACLSecret
	if st := ts.call(context.Background(), t, "POST", api.PathACLTokenCreate, admin, api.ACLTokenRequest{Name: "viewer", Policies: []string{"jobs-read"}}, &viewer); st != 200 {
		t.Fatalf("token create: %d", st)
	}
	if st := ts.call(context.Background(), t, "GET", api.PathOverview, "", nil, nil); st != 401 {
		t.Fatalf("overview without a token: %d, want 401", st)
	}

	open(ctx, t, ts.url+"/ui/?poll=200")
	wait[bool](ctx, t, "the token form", `!document.getElementById('auth').hidden && document.getElementById('main').hidden`)
	enter := func(secret string) {
		t.Helper()
		if err := chromedp.Do(ctx,
			chromedp.SetValue(chromedp.ID("auth-token"), secret),
			chromedp.Click(chromedp.ID("auth-submit")),
		); err != nil {
			t.Fatal(err)
		}
	}
	enter("flk_not-a-token")
	msg := wait[string](ctx, t, "the refusal of an unknown token", `!document.getElementById('auth').hidden && document.getElementById('auth-msg').textContent.includes('did not accept') && document.getElementById('auth-msg').textContent`)
	if !strings.Contains(msg, "unknown") {
		t.Errorf("refusal says %q", msg)
	}

	enter(viewer.Secret)
	banner := wait[string](ctx, t, "a 403 for the prefix \"\"", `!document.getElementById('banner').hidden && document.getElementById('banner').textContent.includes('403') && document.getElementById('banner').textContent`)
	if !strings.Contains(banner, "permission denied") {
		t.Errorf("403 banner says %q", banner)
	}
	if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.ID("prefix"), "jobs/")); err != nil {
		t.Fatal(err)
	}
	holder := wait[string](ctx, t, "jobs/a in the list", row("jobs/a")+` && document.getElementById('banner').hidden && `+row("jobs/a")+`.querySelector('.holder').textContent`)
	if holder != "admin/job" {
		t.Errorf("jobs/a's holder shows as %q", holder)
	}
	stored, err := chromedp.Run(ctx, chromedp.Evaluate[[]any](`[sessionStorage.getItem('fencelock.token'), localStorage.length, !!`+row("ops/b")+`]`))
	if err != nil {
		t.Fatal(err)
	}
	if len(stored) != 3 || stored[0] != viewer.Secret || stored[1] != float64(0) || stored[2] != false {
		t.Errorf("sessionStorage token, localStorage length, ops/b shown: %v", stored)
	}
	noProblems(ctx, t)
}

// TestDashboardScreenshot (with -update) takes docs/img/dashboard.png:
// a few held locks with waiters, a session holding two, and half a minute
// of grants, hand-offs, releases and expiries for the charts.
func TestDashboardScreenshot(t *testing.T) {
	if !*update {
		t.Skip("run with -update to rewrite docs/img/dashboard.png")
	}
	ctx := browser(t, 1360, 1000, 90*time.Second)
	ts := startServer(t)
	open(ctx, t, ts.url+"/ui/?poll=250")
	held := []struct {
		key, holder string
		ttl         time.Duration
	}{
		{"billing/ledger", "ledger-writer-2", 45 * time.Second},
		{"jobs/nightly", "alice", 60 * time.Second},
		{"jobs/report", "report-gen", 40 * time.Second},
		{"cache/warm", "warmer-3", 25 * time.Second},
		{"demo", "me", 30 * time.Second},
	}
	for _, h := range held {
		ts.acquire(t, h.key, h.holder, h.ttl, "")
	}
	var ss api.Session
	if st := ts.call(context.Background(), t, "POST", api.PathSessionOpen, "", api.SessionOpenRequest{Holder: "deployer", TTLMs: 40000}, &ss); st != 200 {
		t.Fatalf("session open: %d", st)
	}
	for _, k := range []string{"deploy/web", "deploy/db"} {
		if st := ts.call(context.Background(), t, "POST", api.PathAcquire, "", api.AcquireRequest{Key: k, Holder: "deployer", Session: ss.ID}, nil); st != 200 {
			t.Fatalf("acquire %s under the session: %d", k, st)
		}
	}
	ctxW, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	waitOn := func(key, holder string) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ts.call(ctxW, t, "POST", api.PathAcquire, "", api.AcquireRequest{Key: key, Holder: holder, TTLMs: 30000, WaitMs: 600000}, nil)
		}()
	}
	// Churn: workers take queue/ keys in turn, hold them a little and
	// release; some leases are left to expire.
	stop := time.Now().Add(24 * time.Second)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for i := 0; time.Now().Before(stop) && ctxW.Err() == nil; i++ {
				key := fmt.Sprintf("queue/shard-%d", rng.IntN(3))
				holder := fmt.Sprintf("worker-%d", w)
				ttl := int64(5000)
				if rng.IntN(6) == 0 {
					ttl = 300 // left to expire
				}
				var l api.Lease
				if ts.call(ctxW, t, "POST", api.PathAcquire, "", api.AcquireRequest{Key: key, Holder: holder, TTLMs: ttl, WaitMs: 3000}, &l) != 200 {
					continue
				}
				select {
				case <-time.After(time.Duration(50+rng.IntN(400)) * time.Millisecond):
				case <-ctxW.Done():
					return
				}
				if ttl > 300 {
					ts.call(ctxW, t, "POST", api.PathRelease, "", api.ReleaseRequest{Key: key, Holder: holder, Token: l.Token}, nil)
				}
			}
		}()
	}
	time.Sleep(20 * time.Second) // the charts fill with real traffic; nothing is decided by it
	waitOn("jobs/nightly", "bob")
	wait[bool](ctx, t, "bob queued", `!!(`+row("jobs/nightly")+` && `+row("jobs/nightly")+`.querySelector('.waiter'))`)
	waitOn("jobs/nightly", "carol")
	waitOn("billing/ledger", "reconciler")
	wait[bool](ctx, t, "three waiters", `document.querySelectorAll('.waiter').length >= 3`)
	time.Sleep(1500 * time.Millisecond) // waiters' ages above zero, for the picture
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join("..", "..", "docs", "img", "dashboard.png")
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(out, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s (%d bytes)", out, len(png))
}
