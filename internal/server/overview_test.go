package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/clock"
)

// getOverview decodes GET /v1/overview into its wire type.
func (ts *testServer) getOverview(query, token string) (int, api.Overview, api.Error) {
	ts.t.Helper()
	req, _ := http.NewRequest("GET", ts.url+api.PathOverview+query, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		ts.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var o api.Overview
	var e api.Error
	if resp.StatusCode == 200 {
		err = json.Unmarshal(raw, &o)
	} else {
		err = json.Unmarshal(raw, &e)
	}
	if err != nil {
		ts.t.Fatalf("overview%s: %d %q", query, resp.StatusCode, raw)
	}
	return resp.StatusCode, o, e
}

// queueInOrder queues waits by holders on key one after the other, each
// once the one before is queued; they are cancelled when the test ends.
func queueInOrder(t *testing.T, ts *testServer, key string, holders ...string) {
	t.Helper()
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); wg.Wait() })
	for i, h := range holders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ts.do(ctx, "POST", api.PathAcquire, fmt.Sprintf(`{"key":%q,"holder":%q,"ttl_ms":60000,"wait_ms":3600000}`, key, h))
		}()
		eventually(t, h+" to queue on "+key, func() bool { return len(ts.fsm.Waiters(key)) == i+1 })
	}
}

// The overview answers, in one read, the page of leases with each one's
// queue in order, the last token, and the lease counters and histograms,
// on the leader's cluster clock (a fake one here, so every duration is
// exact).
func TestOverviewLeasesQueuesAndStats(t *testing.T) {
	cfg := fastConfig("")
	fake := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	cfg.Clock = fake
	cfg.MinTickInterval = time.Nanosecond
	ts := startServer(t, cfg)

	for _, k := range []string{"jobs/a", "jobs/b", "other/c"} {
		if a := ts.post(api.PathAcquire, acquireBody(k, "owner", 60000, "")); a.status != 200 {
			t.Fatalf("acquire %s: %d %v", k, a.status, a.body)
		}
	}
	queueInOrder(t, ts, "jobs/a", "w0", "w1")
	fake.Advance(1500 * time.Millisecond)

	st, o, _ := ts.getOverview("?prefix=jobs/", "")
	if st != 200 {
		t.Fatalf("overview: %d", st)
	}
	if o.LastToken != 3 || o.Queued != 2 || o.More || len(o.Locks) != 2 || o.Node == "" {
		t.Fatalf("overview: %+v", o)
	}
	a := o.Locks[0]
	if a.Key != "jobs/a" || a.Holder != "owner" || a.Token != 1 || a.TTLMs != 60000 || a.RemainingMs != 58500 || a.HeldMs != 1500 {
		t.Errorf("jobs/a: %+v", a)
	}
	if a.WaitersTotal != 2 || len(a.Waiters) != 2 || a.Waiters[0].Holder != "w0" || a.Waiters[1].Holder != "w1" ||
		a.Waiters[0].WaitedMs != 1500 || a.Waiters[0].LeftMs != 3600000-1500 {
		t.Errorf("jobs/a's queue: %d %+v", a.WaitersTotal, a.Waiters)
	}
	if b := o.Locks[1]; b.Key != "jobs/b" || b.Token != 2 || b.WaitersTotal != 0 || b.Waiters == nil {
		t.Errorf("jobs/b: %+v (waiters must be [] not null, for the page)", b)
	}
	if o.Stats.Grants != 3 || o.Stats.Handoffs != 0 || o.Stats.Hold.Count != 0 || len(o.Stats.Hold.BoundsMs) != 10 ||
		len(o.Stats.Hold.Counts) != 11 || o.Stats.Hold.BoundsMs[0] != 1 || o.Stats.Hold.BoundsMs[5] != 1024 {
		t.Errorf("stats before any end: %+v", o.Stats)
	}

	// A release hands jobs/a to w0: a hand-off, a hold of 1.5 s and a wait
	// of 1.5 s.
	if a := ts.post(api.PathRelease, `{"key":"jobs/a","holder":"owner"}`); a.status != 200 || a.body["released"] != true {
		t.Fatalf("release: %d %v", a.status, a.body)
	}
	eventually(t, "w0 to hold jobs/a", func() bool { l, ok := ts.fsm.Get("jobs/a", ts.fsm.Now()); return ok && l.Holder == "w0" })
	_, o, _ = ts.getOverview("?prefix=jobs/&limit=1", "")
	if len(o.Locks) != 1 || !o.More || o.Locks[0].Holder != "w0" || o.Locks[0].Token != 4 || o.LastToken != 4 ||
		o.Locks[0].WaitersTotal != 1 || o.Locks[0].Waiters[0].Holder != "w1" || o.Queued != 1 {
		t.Fatalf("after the hand-off, limit 1: %+v", o)
	}
	s := o.Stats
	// 1.5 s is in the bucket above 1.024 s and up to 4.096 s, the seventh.
	one := []uint64{0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0}
	if s.Grants != 4 || s.Handoffs != 1 || s.Releases != 1 || s.Expiries != 0 ||
		s.Hold.Count != 1 || !slices.Equal(s.Hold.Counts, one) || s.Hold.SumMs != 1500 ||
		s.Wait.Count != 1 || !slices.Equal(s.Wait.Counts, one) || s.Wait.SumMs != 1500 {
		t.Errorf("stats after the hand-off: %+v", s)
	}

	// Bad input is refused, naming the field.
	for _, q := range []string{"?limit=0", "?limit=1001", "?limit=x", "?prefix=" + strings.Repeat("k", api.MaxKeyLen+1)} {
		st, _, e := ts.getOverview(q, "")
		want := "limit"
		if strings.HasPrefix(q, "?prefix") {
			want = "prefix"
		}
		if st != 400 || e.Code != api.CodeInvalid || e.Field != want {
			t.Errorf("overview%.20s: %d %+v, want 400 on %s", q, st, e, want)
		}
	}
}

// With ACLs on the overview is a read: 401 without a token, 403 without
// read on the prefix, and leases below it that the caller may not read
// are left out with their queues.
func TestOverviewNeedsReadOnThePrefix(t *testing.T) {
	ts := startServer(t, fastConfig(""))
	admin := ts.bootstrap()
	for _, k := range []string{"jobs/a", "jobs/secret/b", "other/c"} {
		if a := ts.authDo("POST", api.PathAcquire, acquireBody(k, "admin/x", 60000, ""), admin); a.status != 200 {
			t.Fatalf("acquire %s: %d %v", k, a.status, a.body)
		}
	}
	viewer := ts.token(admin, "viewer", "jobs/:read", "jobs/secret/:read:deny")
	if st, _, e := ts.getOverview("?prefix=jobs/", ""); st != 401 || e.Code != api.CodeUnauthenticated {
		t.Errorf("without a token: %d %+v", st, e)
	}
	if st, _, e := ts.getOverview("", viewer); st != 403 || e.Code != api.CodePermissionDenied {
		t.Errorf("viewer on the prefix \"\": %d %+v", st, e)
	}
	st, o, _ := ts.getOverview("?prefix=jobs/", viewer)
	if st != 200 || len(o.Locks) != 1 || o.Locks[0].Key != "jobs/a" {
		t.Errorf("viewer on jobs/: %d %+v", st, o.Locks)
	}
	if st, o, _ := ts.getOverview("", admin); st != 200 || len(o.Locks) != 3 || o.LastToken != 3 {
		t.Errorf("admin: %d %+v", st, o)
	}
	// Keys in their lock-delay are left out the same way.
	for _, k := range []string{"jobs/d", "jobs/secret/e"} {
		body := fmt.Sprintf(`{"key":%q,"holder":"admin/x","ttl_ms":100,"lock_delay_ms":60000}`, k)
		if a := ts.authDo("POST", api.PathAcquire, body, admin); a.status != 200 {
			t.Fatalf("acquire %s: %d %v", k, a.status, a.body)
		}
	}
	eventually(t, "both keys in their lock-delay", func() bool {
		_, o, _ := ts.getOverview("?prefix=jobs/", admin)
		return len(o.Delayed) == 2
	})
	if st, o, _ := ts.getOverview("?prefix=jobs/", viewer); st != 200 || len(o.Delayed) != 1 || o.Delayed[0].Key != "jobs/d" {
		t.Errorf("viewer on jobs/, keys in their lock-delay: %d %+v", st, o.Delayed)
	}
}

// The dashboard is served at /ui/ with its security headers, without a
// token even when ACLs are on (the page holds no data), and /ui
// redirects to it.
func TestDashboardIsServedPublicly(t *testing.T) {
	ts := startServer(t, fastConfig(""))
	ts.bootstrap()
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noRedirect.Get(ts.url + "/ui?prefix=jobs/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != "/ui/?prefix=jobs/" {
		t.Errorf("/ui: %d Location %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	for path, ctype := range map[string]string{"/ui/": "text/html", "/ui/app.js": "text/javascript", "/ui/app.css": "text/css", "/ui/favicon.svg": "image/svg+xml"} {
		resp, err := http.Get(ts.url + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		h := resp.Header
		if resp.StatusCode != 200 || !strings.HasPrefix(h.Get("Content-Type"), ctype) || len(body) == 0 {
			t.Errorf("%s: %d %q, %d bytes", path, resp.StatusCode, h.Get("Content-Type"), len(body))
		}
		if csp := h.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "script-src 'self'") ||
			!strings.Contains(csp, "frame-ancestors 'none'") || h.Get("X-Content-Type-Options") != "nosniff" || h.Get("X-Frame-Options") != "DENY" {
			t.Errorf("%s: headers %v", path, h)
		}
	}
	if resp, err := http.Get(ts.url + "/ui/nothing.js"); err != nil {
		t.Fatal(err)
	} else if resp.Body.Close(); resp.StatusCode != 404 {
		t.Errorf("/ui/nothing.js: %d", resp.StatusCode)
	}
	req, _ := http.NewRequest("POST", ts.url+"/ui/", nil)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 405 {
		t.Errorf("POST /ui/: %d", resp.StatusCode)
	}
}

// The overview names the session each listed lease is held under and
// answers those sessions: holder, time left, and the keys of their locks;
// sessions_open counts every one, a session holding nothing on the page
// too. Under ACLs a session shows only the keys the caller may read, and
// counts only those.
func TestOverviewSessions(t *testing.T) {
	cfg := fastConfig("")
	fake := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	cfg.Clock = fake
	cfg.MinTickInterval = time.Nanosecond
	ts := startServer(t, cfg)
	admin := ts.bootstrap()
	open := func(holder string) uint64 {
		t.Helper()
		a := ts.authDo("POST", api.PathSessionOpen, fmt.Sprintf(`{"holder":%q,"ttl_ms":20000}`, holder), admin)
		if a.status != 200 {
			t.Fatalf("session open: %d %v", a.status, a.body)
		}
		return uint64(a.body["id"].(float64))
	}
	id := open("admin/deployer")
	open("admin/idle") // holds nothing: counted, not listed
	for _, k := range []string{"deploy/web", "deploy/db", "secret/x"} {
		if a := ts.authDo("POST", api.PathAcquire, fmt.Sprintf(`{"key":%q,"holder":"admin/deployer","session":%d}`, k, id), admin); a.status != 200 {
			t.Fatalf("acquire %s under the session: %d %v", k, a.status, a.body)
		}
	}
	if a := ts.authDo("POST", api.PathAcquire, acquireBody("deploy/solo", "admin/x", 60000, ""), admin); a.status != 200 {
		t.Fatalf("acquire: %d %v", a.status, a.body)
	}
	fake.Advance(1500 * time.Millisecond)

	st, o, _ := ts.getOverview("?prefix=deploy/", admin)
	if st != 200 || o.SessionsOpen != 2 || len(o.Sessions) != 1 {
		t.Fatalf("overview: %d, %d open, sessions %+v", st, o.SessionsOpen, o.Sessions)
	}
	ss := o.Sessions[0]
	if ss.ID != id || ss.Holder != "admin/deployer" || ss.TTLMs != 20000 || ss.RemainingMs != 18500 || ss.Locks != 3 ||
		!slices.Equal(ss.Keys, []string{"deploy/db", "deploy/web", "secret/x"}) {
		t.Errorf("the session: %+v", ss)
	}
	for _, l := range o.Locks {
		if want := map[bool]uint64{true: 0, false: id}[l.Key == "deploy/solo"]; l.Session != want {
			t.Errorf("%s: session %d, want %d", l.Key, l.Session, want)
		}
	}

	viewer := ts.token(admin, "viewer", "deploy/:read", "deploy/db:read:deny")
	st, o, _ = ts.getOverview("?prefix=deploy/", viewer)
	if st != 200 || len(o.Sessions) != 1 {
		t.Fatalf("viewer: %d %+v", st, o.Sessions)
	}
	if ss := o.Sessions[0]; ss.Locks != 1 || ss.Waiting != 0 || !slices.Equal(ss.Keys, []string{"deploy/web"}) {
		t.Errorf("the viewer's view of the session: %+v", ss)
	}
	viewer2 := ts.token(admin, "viewer2", "deploy/solo:read")
	if st, o, _ = ts.getOverview("?prefix=deploy/solo", viewer2); st != 200 || len(o.Sessions) != 0 || len(o.Locks) != 1 {
		t.Errorf("a viewer of no lock under the session: %d %+v", st, o)
	}
}
