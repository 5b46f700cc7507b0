package server

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

// scrape is the /metrics text of ts.
func (ts *testServer) scrape() string {
	ts.t.Helper()
	resp, err := http.Get(ts.url + "/metrics")
	if err != nil {
		ts.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		ts.t.Fatal(err)
	}
	return string(body)
}

// TestMetricsLeases: fencelock_leases and fencelock_leases_by_prefix
// follow grants, releases and expiries, on the server's own clock.
func TestMetricsLeases(t *testing.T) {
	ts, fake := fakeClockServer(t)
	if got := metricValue(ts.scrape(), "fencelock_leases"); got != 0 {
		t.Fatalf("fencelock_leases = %v before any grant, want 0", got)
	}
	for _, k := range []string{"jobs/a", "jobs/b", "db/x", "solo"} {
		if a := ts.post("/v1/acquire", `{"key":"`+k+`","holder":"h","ttl_ms":10000}`); a.status != 200 {
			t.Fatalf("acquire %s: %d %v", k, a.status, a.body)
		}
	}
	text := ts.scrape()
	if got := metricValue(text, "fencelock_leases"); got != 4 {
		t.Fatalf("fencelock_leases = %v after 4 grants, want 4", got)
	}
	for _, want := range []string{
		`fencelock_leases_by_prefix{prefix="jobs/"} 2`,
		`fencelock_leases_by_prefix{prefix="db/"} 1`,
		`fencelock_leases_by_prefix{prefix="solo"} 1`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if r := ts.post("/v1/release", `{"key":"jobs/a","holder":"h"}`); r.body["released"] != true {
		t.Fatalf("release: %v", r.body)
	}
	if got := metricValue(ts.scrape(), "fencelock_leases"); got != 3 {
		t.Fatalf("fencelock_leases = %v after a release, want 3", got)
	}
	fake.Advance(10 * time.Second)
	eventually(t, "expired leases leave fencelock_leases", func() bool {
		return metricValue(ts.scrape(), "fencelock_leases") == 0
	})
	if text := ts.scrape(); strings.Contains(text, "fencelock_leases_by_prefix{") {
		t.Errorf("by-prefix series left with no leases held:\n%s", grepLines(text, "fencelock_leases_by_prefix"))
	}
}

// TestMetricsRaftBuildApply: raft state, build info and the apply and
// commit histograms are in a normal build's scrape.
func TestMetricsRaftBuildApply(t *testing.T) {
	cfg := fastConfig("")
	cfg.BuildVersion, cfg.BuildCommit = "v9.9.9", "abc123"
	ts := startServer(t, cfg)
	ts.post("/v1/acquire", `{"key":"k","holder":"h","ttl_ms":1000}`)
	text := ts.scrape()
	if got := metricValue(text, "fencelock_raft_state"); got != 2 {
		t.Errorf("fencelock_raft_state = %v on a single leader, want 2", got)
	}
	for _, want := range []string{
		`fencelock_build_info{commit="abc123",goversion="go`,
		`version="v9.9.9"} 1`,
		`fencelock_apply_seconds_count `,
		`fencelock_commit_seconds_count{op="acquire"} 1`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if metricValue(text, "fencelock_apply_seconds_count") < 1 {
		t.Errorf("no apply observed:\n%s", grepLines(text, "fencelock_apply"))
	}
}

func grepLines(text, sub string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestMetricsGrafanaDashboard: every metric the dashboard in deploy/
// queries is in a real server's scrape (served through Serve, so the
// connection and framed metrics are there too).
func TestMetricsGrafanaDashboard(t *testing.T) {
	raw, err := os.ReadFile("../../deploy/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("deploy/grafana-dashboard.json: %v", err)
	}
	// A connection cap (fencelock server always has one: 0 derives it from
	// the open-file limit) exports the connection metrics.
	addr := serveForTest(t, Config{MaxConnections: 64})
	url := "http://" + addr
	eventually(t, "leader ready", func() bool {
		resp, err := http.Get(url + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	for _, call := range [][2]string{
		{"/v1/acquire", `{"key":"g/k","holder":"h","ttl_ms":5000}`},
		{"/v1/release", `{"key":"g/k","holder":"h"}`},
		{"/v1/acquire", `{"key":"g/held","holder":"h","ttl_ms":60000}`},
	} {
		path := call[0]
		resp, err := http.Post(url+path, "application/json", strings.NewReader(call[1]))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d", path, resp.StatusCode)
		}
	}
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	scraped := map[string]bool{}
	for _, l := range strings.Split(string(body), "\n") {
		if l == "" || l[0] == '#' {
			continue
		}
		name, _, _ := strings.Cut(l, " ")
		name, _, _ = strings.Cut(name, "{")
		scraped[name] = true
	}
	name := regexp.MustCompile(`\bfencelock_[a-z_]+`)
	n := 0
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q queries nothing", p.Title)
		}
		for _, tg := range p.Targets {
			for _, m := range name.FindAllString(tg.Expr, -1) {
				n++
				if !scraped[m] {
					t.Errorf("panel %q queries %s, which the server does not export", p.Title, m)
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("the dashboard names no fencelock metric")
	}
}
