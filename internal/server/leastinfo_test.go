package server

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/fencelock/fencelock/api"
)

// jsonAcquire is an acquire's body for any key, control characters too.
func jsonAcquire(key, holder string) string {
	return jsonString(map[string]any{"key": key, "holder": holder, "ttl_ms": 60000})
}

// Issue 24, finding 7: keys such as a//secret/x, a/./secret/x and
// a/x/../secret/x slipped past a deny on a/secret/ because they are other
// strings. With ACLs on, keys (and the complete segments of prefixes) with
// empty, "." or ".." segments, control characters or NUL are refused 400.
func TestACLKeysWithAmbiguousSegmentsAreRefused(t *testing.T) {
	ts := startServer(t, fastConfig(""))
	// Before ACLs are on, such keys are only strings, as they always were.
	if a := ts.post(api.PathAcquire, acquireBody("open//x", "anyone", 60000, "")); a.status != 200 {
		t.Fatalf("acquire open//x before bootstrap: %d %v", a.status, a.body)
	}
	admin := ts.bootstrap()
	bob := ts.token(admin, "bob", "a/:lock,read", "a/secret/:lock,read:deny")
	applied := ts.fsm.AppliedIndex()
	for _, key := range []string{
		"a//secret/x", "a/./secret/x", "a/x/../secret/x", "a/secret/..", "a/.", "a/", "/a/x",
		"a/x\x00y", "a/x\ny", "a/x\x7fy", "a/x\ty",
	} {
		a := ts.authDo("POST", api.PathAcquire, jsonAcquire(key, "bob"), bob)
		if a.status != 400 || a.body["code"] != api.CodeInvalid || a.body["field"] != "key" {
			t.Errorf("acquire %q: %d %v, want 400 invalid_argument on key", key, a.status, a.body)
		}
		a = ts.authDo("GET", api.PathLock+"?key="+url.QueryEscape(key), "", bob)
		if a.status != 400 {
			t.Errorf("get %q: %d %v, want 400", key, a.status, a.body)
		}
	}
	for _, prefix := range []string{"a//", "a/./", "a/../", "a/x\x00"} {
		a := ts.authDo("GET", api.PathLocks+"?prefix="+url.QueryEscape(prefix), "", bob)
		if a.status != 400 || a.body["field"] != "prefix" {
			t.Errorf("list %q: %d %v, want 400 on prefix", prefix, a.status, a.body)
		}
	}
	if got := ts.fsm.AppliedIndex(); got != applied {
		t.Errorf("refused calls applied entries: index %d, was %d", got, applied)
	}
	// Keys that only look alike are still keys; a partial last segment of
	// a prefix is a prefix.
	for _, key := range []string{"a/x.y", "a/..x", "a/.hidden", "a/x-y/z"} {
		if a := ts.authDo("POST", api.PathAcquire, acquireBody(key, "bob", 60000, ""), bob); a.status != 200 {
			t.Errorf("acquire %q: %d %v, want 200", key, a.status, a.body)
		}
	}
	for _, prefix := range []string{"a/", "a/.", "a/x", ""} {
		a := ts.authDo("GET", api.PathLocks+"?prefix="+url.QueryEscape(prefix), "", admin)
		if a.status != 200 {
			t.Errorf("list %q: %d %v, want 200", prefix, a.status, a.body)
		}
	}
	if a := ts.authDo("GET", api.PathLock+"?key="+url.QueryEscape("a/secret/x"), "", bob); a.status != 403 {
		t.Errorf("the deny still decides a/secret/x: %d %v", a.status, a.body)
	}
	if a := ts.authDo("POST", api.PathAcquire, acquireBody("a/x/../secret/y", "admin", 60000, ""), admin); a.status != 400 ||
		!strings.Contains(a.body["error"].(string), `".."`) {
		t.Errorf("admin acquire a/x/../secret/y: %d %v, want 400 naming the segment", a.status, a.body)
	}
}

// Issue 24, finding 7: in the default configuration cluster/announce
// stored any string as a client address, which became the dashboard's
// link to the leader. A client address must be host:port.
func TestAnnounceRefusesAClientAddressThatIsNotHostPort(t *testing.T) {
	ts := startServer(t, fastConfig(""))
	raftAddr := ts.node.Addr()
	for _, addr := range []string{
		"javascript:alert(1)", "evil.example", "http://evil.example:80", "evil.example:80/x", "a b:80",
		"evil.example:0", "evil.example:99999", "evil.example:http", ":80", "user@evil.example:80", "[::1]:80\n",
	} {
		body := jsonString(map[string]string{"id": ts.cfg.NodeID, "raft_addr": raftAddr, "client_addr": addr})
		a := ts.post(api.PathAnnounce, body)
		if a.status != 400 || a.body["field"] != "client_addr" {
			t.Errorf("announce %q: %d %v, want 400 on client_addr", addr, a.status, a.body)
		}
		if m, ok := ts.fsm.Member(ts.cfg.NodeID); ok && m.ClientAddr == addr {
			t.Errorf("announce %q was recorded", addr)
		}
	}
	for _, addr := range []string{"127.0.0.1:7470", "[::1]:7470", "node-2.example.com:443"} {
		body := jsonString(map[string]string{"id": ts.cfg.NodeID, "raft_addr": raftAddr, "client_addr": addr})
		if a := ts.post(api.PathAnnounce, body); a.status != 200 {
			t.Errorf("announce %q: %d %v, want 200", addr, a.status, a.body)
		}
	}
}

// scrapeAs is the /metrics text with a bearer token.
func (ts *testServer) scrapeAs(token string) (int, string) {
	ts.t.Helper()
	req, _ := http.NewRequest("GET", ts.url+api.PathMetrics, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		ts.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// Issue 24, finding 7: /metrics showed key names
// (fencelock_leases_by_prefix{prefix="payroll-secret-merger-acme"}) to a
// principal with no policies, and /v1/overview?prefix=b/ showed the
// cluster-wide last token and grant, release and expiry counts. A
// per-prefix series is shown only to a principal that may read every key
// under the prefix, and the cluster-wide figures of an overview only to
// one that may read every key.
func TestACLPerPrefixMetricsAndOverviewStatsNeedRead(t *testing.T) {
	ts := startServer(t, fastConfig(""))
	admin := ts.bootstrap()
	for _, k := range []string{"payroll-secret-merger-acme", "b/x", "b/hidden/y", "c/z"} {
		if a := ts.authDo("POST", api.PathAcquire, acquireBody(k, "admin", 60000, ""), admin); a.status != 200 {
			t.Fatalf("acquire %s: %d %v", k, a.status, a.body)
		}
	}
	nobody := ts.token(admin, "nobody")
	bob := ts.token(admin, "bob", "b/:read", "c/:read")
	carol := ts.token(admin, "carol", "b/:read", "b/hidden/:read:deny")

	series := func(text string) []string {
		var out []string
		for _, l := range strings.Split(text, "\n") {
			if strings.HasPrefix(l, "fencelock_leases_by_prefix{") {
				out = append(out, l[:strings.LastIndexByte(l, ' ')])
			}
		}
		return out
	}
	for _, c := range []struct {
		name, token string
		want        []string
	}{
		{"nobody", nobody, nil},
		{"bob", bob, []string{`fencelock_leases_by_prefix{prefix="b/"}`, `fencelock_leases_by_prefix{prefix="c/"}`}},
		{"carol", carol, nil}, // b/ holds b/hidden/, which she may not read
		{"admin", admin, []string{`fencelock_leases_by_prefix{prefix="b/"}`, `fencelock_leases_by_prefix{prefix="c/"}`,
			`fencelock_leases_by_prefix{prefix="payroll-secret-merger-acme"}`}},
	} {
		st, text := ts.scrapeAs(c.token)
		got := series(text)
		if st != 200 || !slices.Equal(got, c.want) {
			t.Errorf("%s: %d, per-prefix series %q, want %q", c.name, st, got, c.want)
		}
		// The total sums every key: only for a reader of every key
		// (issue 41; TestACLMetricsTableFiguresNeedReadOnEverything).
		if want := map[bool]float64{true: 4, false: -1}[c.name == "admin"]; metricValue(text, "fencelock_leases") != want {
			t.Errorf("%s: fencelock_leases %v, want %v:\n%s", c.name, metricValue(text, "fencelock_leases"), want, grepLines(text, "fencelock_leases"))
		}
	}

	st, o, _ := ts.getOverview("?prefix=b/", bob)
	if st != 200 || len(o.Locks) != 2 {
		t.Fatalf("bob's overview of b/: %d %+v", st, o)
	}
	if o.LastToken != 0 || o.Stats.Grants != 0 || o.Queued != 0 || !o.StatsHidden {
		t.Errorf("bob's overview of b/ shows the cluster's figures: last_token %d, grants %d, queued %d, stats_hidden %v",
			o.LastToken, o.Stats.Grants, o.Queued, o.StatsHidden)
	}
	if len(o.Stats.Hold.BoundsMs) == 0 {
		t.Errorf("hidden stats keep their histogram bounds (the dashboard draws them): %+v", o.Stats.Hold)
	}
	st, o, _ = ts.getOverview("", admin)
	if st != 200 || o.LastToken != 4 || o.Stats.Grants != 4 || o.StatsHidden {
		t.Errorf("admin's overview: %d last_token %d grants %d hidden %v", st, o.LastToken, o.Stats.Grants, o.StatsHidden)
	}
}

// Issue 41, item 4: /metrics showed a principal with no policies
// fencelock_last_token, fencelock_leases and the grant counts, which its
// overview hides (stats_hidden). The figures that sum the whole table
// follow the overview's rule: shown only to a principal that may read
// every key; the node's own health (connections, raft, the runtime) is
// shown to every principal.
func TestACLMetricsTableFiguresNeedReadOnEverything(t *testing.T) {
	ts := startServer(t, fastConfig(""))
	admin := ts.bootstrap()
	for _, k := range []string{"a/x", "b/y"} {
		if a := ts.authDo("POST", api.PathAcquire, acquireBody(k, "admin", 60000, ""), admin); a.status != 200 {
			t.Fatalf("acquire %s: %d %v", k, a.status, a.body)
		}
	}
	nobody := ts.token(admin, "nobody")
	bob := ts.token(admin, "bob", "b/:read")
	reader := ts.token(admin, "reader", ":read")
	table := []string{"fencelock_last_token", "fencelock_leases", "fencelock_grants_total", "fencelock_queued_waiters",
		"fencelock_sessions", "fencelock_commit_seconds", "fencelock_http_requests_total",
		"fencelock_apply_seconds"}
	health := []string{"fencelock_is_leader", "fencelock_raft_state", "fencelock_build_info", "go_goroutines"}
	for _, c := range []struct {
		name, token string
		all         bool
	}{{"nobody", nobody, false}, {"bob", bob, false}, {"reader", reader, true}, {"admin", admin, true}} {
		st, text := ts.scrapeAs(c.token)
		if st != 200 {
			t.Fatalf("%s: /metrics %d", c.name, st)
		}
		has := func(name string) bool {
			return strings.Contains(text, "\n"+name+" ") || strings.Contains(text, "\n"+name+"{") || strings.Contains(text, "\n"+name+"_count")
		}
		for _, name := range table {
			if shown := has(name); shown != c.all {
				t.Errorf("%s: %s shown %v, want %v", c.name, name, shown, c.all)
			}
		}
		for _, name := range health {
			if !has(name) {
				t.Errorf("%s: %s not shown", c.name, name)
			}
		}
	}
	if _, text := ts.scrapeAs(admin); metricValue(text, "fencelock_last_token") != 2 {
		t.Errorf("admin's fencelock_last_token: %v", metricValue(text, "fencelock_last_token"))
	}
}

// The "other" series sums prefixes past the first 20, which a caller
// cannot tell apart: only a principal that may read every key sees it.
func TestACLOtherPrefixSeriesNeedsReadOnEverything(t *testing.T) {
	ts := startServer(t, fastConfig(""))
	admin := ts.bootstrap()
	for i := range 22 {
		k := fmt.Sprintf("p%02d/x", i)
		if a := ts.authDo("POST", api.PathAcquire, acquireBody(k, "admin", 60000, ""), admin); a.status != 200 {
			t.Fatalf("acquire %s: %d %v", k, a.status, a.body)
		}
	}
	most := ts.token(admin, "most", "p:read", "p21/:read:deny")
	const other = `fencelock_leases_by_prefix{prefix="other"}`
	if _, text := ts.scrapeAs(admin); !strings.Contains(text, other) {
		t.Fatalf("admin does not see the other series:\n%s", grepLines(text, "by_prefix"))
	}
	_, text := ts.scrapeAs(most)
	if strings.Contains(text, other) {
		t.Errorf("a principal denied p21/ sees the other series")
	}
	if !strings.Contains(text, `fencelock_leases_by_prefix{prefix="p00/"}`) {
		t.Errorf("it does not see p00/:\n%s", grepLines(text, "by_prefix"))
	}
}
