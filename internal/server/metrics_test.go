package server

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/internal/locktable"
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

func TestMetricsLeasePrefixesCapped(t *testing.T) {
	var leases []locktable.Lease
	for i := range 25 {
		leases = append(leases, locktable.Lease{Key: fmt.Sprintf("p%02d/k", i)}, locktable.Lease{Key: fmt.Sprintf("p%02d/l", i)})
	}
	got := leasePrefixes(leases, 20)
	if len(got) != 21 {
		t.Fatalf("%d series, want 20 prefixes and other: %v", len(got), got)
	}
	if got[0] != (prefixCount{"p00/", 2}) || got[19] != (prefixCount{"p19/", 2}) || got[20] != (prefixCount{"other", 10}) {
		t.Fatalf("prefix counts %v", got)
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
