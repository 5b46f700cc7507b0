package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fastConfig elects a single node quickly, on the engine
// FENCELOCK_TEST_ENGINE names (empty: the default, hashicorp), writing
// the etcd engine's log asynchronously when FENCELOCK_ETCD_ASYNC_WRITES
// is 1 (as the server's flag reads it).
func fastConfig(dir string) Config {
	level := slog.LevelError
	if os.Getenv("FENCELOCK_TEST_LOG") != "" {
		level = slog.LevelDebug
	}
	return Config{
		DataDir:            dir,
		Engine:             os.Getenv("FENCELOCK_TEST_ENGINE"),
		AsyncLogWrites:     os.Getenv("FENCELOCK_ETCD_ASYNC_WRITES") == "1",
		HeartbeatTimeout:   50 * time.Millisecond,
		ElectionTimeout:    50 * time.Millisecond,
		LeaderLeaseTimeout: 50 * time.Millisecond,
		Logger:             slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})),
	}
}

type testServer struct {
	*Server
	t   *testing.T
	url string
	hs  *httptest.Server
}

func startServer(t *testing.T, cfg Config) *testServer {
	t.Helper()
	s := readyServer(t, cfg)
	hs := httptest.NewServer(s.Handler())
	ts := &testServer{Server: s, t: t, url: hs.URL, hs: hs}
	t.Cleanup(ts.stop)
	return ts
}

// stop shuts down like Serve does; it may be called twice.
func (ts *testServer) stop() {
	if ts.hs == nil {
		return
	}
	ts.BeginShutdown()
	ts.hs.Close()
	if err := ts.Close(); err != nil {
		ts.t.Errorf("close: %v", err)
	}
	ts.hs = nil
}

type answer struct {
	status int
	body   map[string]any
	header http.Header
}

func (ts *testServer) do(ctx context.Context, method, path, body string) answer {
	ts.t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, ts.url+path, strings.NewReader(body))
	if err != nil {
		ts.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json") // what every client sends with a body
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return answer{}
		}
		ts.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	a := answer{status: resp.StatusCode, header: resp.Header}
	if resp.Header.Get("Content-Type") == "application/json" {
		if err := json.Unmarshal(raw, &a.body); err != nil {
			ts.t.Fatalf("%s %s: answer is not a JSON object: %q", method, path, raw)
		}
	}
	return a
}

func (ts *testServer) post(path, body string) answer {
	ts.t.Helper()
	return ts.do(context.Background(), http.MethodPost, path, body)
}

func (ts *testServer) get(path string) answer {
	ts.t.Helper()
	return ts.do(context.Background(), http.MethodGet, path, "")
}

func num(a answer, field string) uint64 {
	f, _ := a.body[field].(float64)
	return uint64(f)
}

func TestErrorPaths(t *testing.T) {
	ts := startServer(t, fastConfig(""))
	long := strings.Repeat("k", 1025)
	longHolder := strings.Repeat("h", 257)
	big := `{"key":"k","holder":"h","ttl_ms":1000,"request_id":"` + strings.Repeat("x", 70<<10) + `"}`
	items := make([]string, 1001)
	for i := range items {
		items[i] = `{"key":"k","token":1}`
	}
	cases := []struct {
		name, method, path, body string
		status                   int
		code, field              string
	}{
		{"malformed", "POST", "/v1/acquire", `{"key":`, 400, "invalid_argument", "body"},
		{"syntax", "POST", "/v1/acquire", `{"key" "k"}`, 400, "invalid_argument", "body"},
		{"empty body", "POST", "/v1/acquire", ``, 400, "invalid_argument", "body"},
		{"array body", "POST", "/v1/acquire", `[1,2]`, 400, "invalid_argument", "body"},
		{"trailing", "POST", "/v1/acquire", `{"key":"k","holder":"h","ttl_ms":1000} {}`, 400, "invalid_argument", "body"},
		{"too big", "POST", "/v1/acquire", big, 400, "invalid_argument", "body"},
		{"unknown field", "POST", "/v1/acquire", `{"key":"k","holder":"h","ttl_ms":1000,"bogus":1}`, 400, "invalid_argument", "bogus"},
		{"missing key", "POST", "/v1/acquire", `{"holder":"h","ttl_ms":1000}`, 400, "invalid_argument", "key"},
		{"key too long", "POST", "/v1/acquire", `{"key":"` + long + `","holder":"h","ttl_ms":1000}`, 400, "invalid_argument", "key"},
		{"key wrong type", "POST", "/v1/acquire", `{"key":5,"holder":"h","ttl_ms":1000}`, 400, "invalid_argument", "key"},
		{"missing holder", "POST", "/v1/acquire", `{"key":"k","ttl_ms":1000}`, 400, "invalid_argument", "holder"},
		{"holder too long", "POST", "/v1/acquire", `{"key":"k","holder":"` + longHolder + `","ttl_ms":1000}`, 400, "invalid_argument", "holder"},
		{"missing ttl", "POST", "/v1/acquire", `{"key":"k","holder":"h"}`, 400, "invalid_argument", "ttl_ms"},
		{"ttl too small", "POST", "/v1/acquire", `{"key":"k","holder":"h","ttl_ms":99}`, 400, "invalid_argument", "ttl_ms"},
		{"ttl too big", "POST", "/v1/acquire", `{"key":"k","holder":"h","ttl_ms":86400001}`, 400, "invalid_argument", "ttl_ms"},
		{"ttl negative", "POST", "/v1/acquire", `{"key":"k","holder":"h","ttl_ms":-5}`, 400, "invalid_argument", "ttl_ms"},
		{"ttl fraction", "POST", "/v1/acquire", `{"key":"k","holder":"h","ttl_ms":1.5}`, 400, "invalid_argument", "ttl_ms"},
		{"ttl string", "POST", "/v1/acquire", `{"key":"k","holder":"h","ttl_ms":"1s"}`, 400, "invalid_argument", "ttl_ms"},
		{"ttl overflow", "POST", "/v1/acquire", `{"key":"k","holder":"h","ttl_ms":1e30}`, 400, "invalid_argument", "ttl_ms"},
		{"wait negative", "POST", "/v1/acquire", `{"key":"k","holder":"h","ttl_ms":1000,"wait_ms":-1}`, 400, "invalid_argument", "wait_ms"},
		{"wait too long", "POST", "/v1/acquire", `{"key":"k","holder":"h","ttl_ms":1000,"wait_ms":3600001}`, 400, "invalid_argument", "wait_ms"},
		{"request id too long", "POST", "/v1/acquire", `{"key":"k","holder":"h","ttl_ms":1000,"request_id":"` + strings.Repeat("r", 65) + `"}`, 400, "invalid_argument", "request_id"},
		{"renew missing ttl", "POST", "/v1/renew", `{"key":"k","holder":"h"}`, 400, "invalid_argument", "ttl_ms"},
		{"renew unknown field", "POST", "/v1/renew", `{"key":"k","holder":"h","ttl_ms":1000,"token":3}`, 400, "invalid_argument", "token"},
		{"extend missing token", "POST", "/v1/extend", `{"key":"k","holder":"h","ttl_ms":1000}`, 400, "invalid_argument", "token"},
		{"extend negative token", "POST", "/v1/extend", `{"key":"k","holder":"h","ttl_ms":1000,"token":-1}`, 400, "invalid_argument", "token"},
		{"extend missing holder", "POST", "/v1/extend", `{"key":"k","token":1,"ttl_ms":1000}`, 400, "invalid_argument", "holder"},
		{"batch no leases", "POST", "/v1/extend-batch", `{"holder":"h","ttl_ms":1000,"leases":[]}`, 400, "invalid_argument", "leases"},
		{"batch too many", "POST", "/v1/extend-batch", `{"holder":"h","ttl_ms":1000,"leases":[` + strings.Join(items, ",") + `]}`, 400, "invalid_argument", "leases"},
		{"batch bad key", "POST", "/v1/extend-batch", `{"holder":"h","ttl_ms":1000,"leases":[{"key":"a","token":1},{"key":"","token":2}]}`, 400, "invalid_argument", "leases[1].key"},
		{"batch missing token", "POST", "/v1/extend-batch", `{"holder":"h","ttl_ms":1000,"leases":[{"key":"a"}]}`, 400, "invalid_argument", "leases[0].token"},
		{"batch item wrong type", "POST", "/v1/extend-batch", `{"holder":"h","ttl_ms":1000,"leases":[{"key":"a","token":"x"}]}`, 400, "invalid_argument", "leases.token"},
		{"batch unknown item field", "POST", "/v1/extend-batch", `{"holder":"h","ttl_ms":1000,"leases":[{"key":"a","token":1,"x":1}]}`, 400, "invalid_argument", "x"},
		{"batch missing holder", "POST", "/v1/extend-batch", `{"ttl_ms":1000,"leases":[{"key":"a","token":1}]}`, 400, "invalid_argument", "holder"},
		{"release missing key", "POST", "/v1/release", `{"holder":"h"}`, 400, "invalid_argument", "key"},
		{"release bad token", "POST", "/v1/release", `{"key":"k","holder":"h","token":"x"}`, 400, "invalid_argument", "token"},
		{"check missing key", "GET", "/v1/check?token=1", "", 400, "invalid_argument", "key"},
		{"check missing token", "GET", "/v1/check?key=k", "", 400, "invalid_argument", "token"},
		{"check bad token", "GET", "/v1/check?key=k&token=abc", "", 400, "invalid_argument", "token"},
		{"check key too long", "GET", "/v1/check?key=" + long + "&token=1", "", 400, "invalid_argument", "key"},
		{"get missing key", "GET", "/v1/lock", "", 400, "invalid_argument", "key"},
		{"list bad limit", "GET", "/v1/locks?limit=0", "", 400, "invalid_argument", "limit"},
		{"list limit not a number", "GET", "/v1/locks?limit=ten", "", 400, "invalid_argument", "limit"},
		{"list prefix too long", "GET", "/v1/locks?prefix=" + long, "", 400, "invalid_argument", "prefix"},
		{"get not found", "GET", "/v1/lock?key=nothing", "", 404, "not_found", ""},
		{"unknown route", "GET", "/v1/nothing", "", 404, "not_found", ""},
		{"root", "GET", "/", "", 404, "not_found", ""},
		{"wrong method acquire", "GET", "/v1/acquire", "", 405, "method_not_allowed", ""},
		{"wrong method check", "POST", "/v1/check", "{}", 405, "method_not_allowed", ""},
		{"wrong method healthz", "DELETE", "/healthz", "", 405, "method_not_allowed", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ts.t = t
			a := ts.do(context.Background(), c.method, c.path, c.body)
			if a.status != c.status || a.body["code"] != c.code {
				t.Fatalf("status %d code %v, want %d %s (body %v)", a.status, a.body["code"], c.status, c.code, a.body)
			}
			if c.field != "" && a.body["field"] != c.field {
				t.Fatalf("field %v, want %q (error %q)", a.body["field"], c.field, a.body["error"])
			}
			if msg, _ := a.body["error"].(string); msg == "" {
				t.Fatal("error message is empty")
			}
			if c.status == 405 && a.header.Get("Allow") == "" {
				t.Fatal("405 without an Allow header")
			}
		})
	}
	ts.t = t
	if got := ts.fsm.LastToken(); got != 0 {
		t.Fatalf("bad input issued %d tokens", got)
	}
}

func TestAcquireRenewExtendReleaseCheck(t *testing.T) {
	ts := startServer(t, fastConfig(""))
	a := ts.post("/v1/acquire", `{"key":"jobs/a","holder":"alice","ttl_ms":60000}`)
	if a.status != 200 || num(a, "token") != 1 || a.body["holder"] != "alice" || num(a, "ttl_ms") != 60000 || num(a, "remaining_ms") == 0 {
		t.Fatalf("acquire: %d %v", a.status, a.body)
	}
	a = ts.post("/v1/acquire", `{"key":"jobs/a","holder":"bob","ttl_ms":60000}`)
	if a.status != 409 || a.body["code"] != "held" || a.body["holder"] != "alice" || num(a, "remaining_ms") == 0 {
		t.Fatalf("acquire by bob: %d %v", a.status, a.body)
	}
	if a := ts.post("/v1/renew", `{"key":"jobs/a","holder":"bob","ttl_ms":60000}`); a.status != 409 || a.body["code"] != "not_held" {
		t.Fatalf("renew by bob: %d %v", a.status, a.body)
	}
	a = ts.post("/v1/renew", `{"key":"jobs/a","holder":"alice","ttl_ms":30000}`)
	if a.status != 200 || num(a, "token") != 2 {
		t.Fatalf("renew: %d %v", a.status, a.body)
	}
	if a := ts.get("/v1/check?key=jobs/a&token=1"); a.status != 200 || a.body["valid"] != false {
		t.Fatalf("check stale token: %v", a.body)
	}
	if a := ts.get("/v1/check?key=jobs/a&token=2"); a.status != 200 || a.body["valid"] != true || num(a, "token") != 2 {
		t.Fatalf("check current token: %v", a.body)
	}
	if a := ts.post("/v1/extend", `{"key":"jobs/a","holder":"alice","token":1,"ttl_ms":60000}`); a.status != 409 || a.body["code"] != "not_held" {
		t.Fatalf("extend with old token: %d %v", a.status, a.body)
	}
	a = ts.post("/v1/extend", `{"key":"jobs/a","holder":"alice","token":2,"ttl_ms":90000}`)
	if a.status != 200 || num(a, "token") != 2 || num(a, "ttl_ms") != 90000 {
		t.Fatalf("extend: %d %v", a.status, a.body)
	}
	ts.post("/v1/acquire", `{"key":"jobs/b","holder":"alice","ttl_ms":60000}`) // token 3
	a = ts.post("/v1/extend-batch", `{"holder":"alice","ttl_ms":5000,"leases":[{"key":"jobs/a","token":2},{"key":"jobs/b","token":99}]}`)
	res, _ := a.body["results"].([]any)
	if a.status != 200 || len(res) != 2 {
		t.Fatalf("extend-batch: %d %v", a.status, a.body)
	}
	if r0 := res[0].(map[string]any); r0["ok"] != true || r0["lease"].(map[string]any)["ttl_ms"] != 5000.0 {
		t.Fatalf("batch item 0: %v", r0)
	}
	if r1 := res[1].(map[string]any); r1["ok"] != false || r1["code"] != "not_held" {
		t.Fatalf("batch item 1: %v", r1)
	}
	a = ts.get("/v1/lock?key=jobs/a")
	if a.status != 200 || num(a, "token") != 2 || a.body["key"] != "jobs/a" {
		t.Fatalf("get: %d %v", a.status, a.body)
	}
	a = ts.get("/v1/locks?prefix=jobs/")
	if locks, _ := a.body["locks"].([]any); a.status != 200 || len(locks) != 2 || locks[0].(map[string]any)["key"] != "jobs/a" {
		t.Fatalf("list: %d %v", a.status, a.body)
	}
	if a := ts.get("/v1/locks?prefix=jobs/&limit=1"); len(a.body["locks"].([]any)) != 1 {
		t.Fatalf("list limit 1: %v", a.body)
	}
	if a := ts.post("/v1/release", `{"key":"jobs/a","holder":"bob"}`); a.status != 200 || a.body["released"] != false {
		t.Fatalf("release by bob: %v", a.body)
	}
	if a := ts.post("/v1/release", `{"key":"jobs/a","holder":"alice","token":1}`); a.body["released"] != false {
		t.Fatalf("release with stale token: %v", a.body)
	}
	if a := ts.post("/v1/release", `{"key":"jobs/a","holder":"alice","token":2,"request_id":"r-1"}`); a.body["released"] != true {
		t.Fatalf("release: %v", a.body)
	}
	if a := ts.get("/v1/check?key=jobs/a&token=2"); a.body["valid"] != false {
		t.Fatalf("check after release: %v", a.body)
	}
	if a := ts.get("/v1/lock?key=jobs/a"); a.status != 404 {
		t.Fatalf("get after release: %d", a.status)
	}
	if a := ts.get("/healthz"); a.status != 200 || a.body["status"] != "ok" {
		t.Fatalf("healthz: %v", a)
	}
	if a := ts.get("/readyz"); a.status != 200 {
		t.Fatalf("readyz: %v", a)
	}
}

func TestRetryWithRequestIDGetsTheOriginalAnswer(t *testing.T) {
	ts := startServer(t, fastConfig(""))
	body := `{"key":"k","holder":"h","ttl_ms":60000,"request_id":"0123456789ab"}`
	first := ts.post("/v1/acquire", body)
	again := ts.post("/v1/acquire", body)
	if first.status != 200 || again.status != 200 || num(again, "token") != num(first, "token") {
		t.Fatalf("retry: %v then %v", first.body, again.body)
	}
	rel := `{"key":"k","holder":"h","request_id":"rel-1"}`
	if a, b := ts.post("/v1/release", rel), ts.post("/v1/release", rel); a.body["released"] != true || b.body["released"] != true {
		t.Fatalf("retried release: %v then %v", a.body, b.body)
	}
	if got := ts.fsm.LastToken(); got != 1 {
		t.Fatalf("%d tokens issued", got)
	}
	if got := ts.metric("fencelock_retried_requests_total"); got != 2 {
		t.Fatalf("retries counted %v, want 2", got)
	}
}

func TestMetricsExposed(t *testing.T) {
	ts := startServer(t, fastConfig(""))
	ts.post("/v1/acquire", `{"key":"m","holder":"a","ttl_ms":1000}`)
	ts.post("/v1/acquire", `{"key":"m","holder":"b","ttl_ms":1000}`)
	ts.post("/v1/release", `{"key":"m","holder":"a"}`)
	resp, err := http.Get(ts.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, want := range []string{
		`fencelock_grants_total{waited="false"} 1`,
		`fencelock_refusals_total{op="acquire"} 1`,
		`fencelock_lease_ends_total{reason="released"} 1`,
		`fencelock_commit_seconds_bucket{op="acquire"`,
		`fencelock_hold_seconds_count{reason="released"} 1`,
		`fencelock_waiters 0`,
		`fencelock_last_token 1`,
		`fencelock_is_leader 1`,
		`go_goroutines`,
	} {
		if !bytes.Contains(body, []byte(want)) {
			t.Errorf("metrics lack %q", want)
		}
	}
}
