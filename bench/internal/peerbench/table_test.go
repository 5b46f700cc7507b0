package peerbench

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestRatio(t *testing.T) {
	tests := []struct {
		fl, sys float64
		want    float64
		ok      bool
	}{
		{1200, 1000, 1.2, true},
		{500, 1000, 0.5, true},
		{0, 1000, 0, false},
		{1000, 0, 0, false},
	}
	for _, tt := range tests {
		got, ok := Ratio(tt.fl, tt.sys)
		if ok != tt.ok || (ok && (got < tt.want-1e-9 || got > tt.want+1e-9)) {
			t.Errorf("Ratio(%v, %v) = %v, %v; want %v, %v", tt.fl, tt.sys, got, ok, tt.want, tt.ok)
		}
	}
}

func sampleResults() []Result {
	return []Result{
		{System: "fencelock", Workload: W1, Rate: 12000, Latency: Summary{P50: 2 * time.Millisecond, P99: 5 * time.Millisecond}},
		{System: "redis", Workload: W1, Rate: 10000, Latency: Summary{P50: 3 * time.Millisecond, P99: 10 * time.Millisecond}},
		{System: "etcd", Workload: W1, Rate: 2000, Latency: Summary{P50: 10 * time.Millisecond, P99: 40 * time.Millisecond}, Errors: 3, FirstError: "boom"},
		{System: "zookeeper", Workload: W3, Skipped: "a session is the lease"},
		{System: "redis", Workload: W2, Rate: 300, Elapsed: time.Second, Latency: Summary{P50: time.Millisecond, P99: 80 * time.Millisecond},
			Fairness: &Fairness{Grants: 600, HandOffs: 300, Overtaken: 7, MaxOvertakes: 3, WorstGap: 45 * time.Millisecond, LongestWait: 120 * time.Millisecond}},
	}
}

func TestFormatTableRatiosToFencelock(t *testing.T) {
	var b bytes.Buffer
	if err := FormatTable(&b, sampleResults(), false); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
	if len(lines) != 6 {
		t.Fatalf("got %d lines, want header + 5:\n%s", len(lines), b.String())
	}
	checks := []struct {
		line int
		want []string
	}{
		{1, []string{"fencelock", "12000", "1.00×", "2.00ms", "5.00ms"}},
		{2, []string{"redis", "10000", "1.20×", "0.50×"}},
		{3, []string{"etcd", "6.00×", "0.12×", "first error: boom"}},
		{4, []string{"zookeeper", "n/a", "a session is the lease"}},
		// no fencelock result for w2: no ratio
		{5, []string{"w2", "redis", "—", "grants/s 600", "FIFO no (7 of 600 waits overtaken, by up to 3 later starters, up to 45.0ms later)", "longest wait 120.0ms"}},
	}
	for _, c := range checks {
		for _, w := range c.want {
			if !strings.Contains(lines[c.line], w) {
				t.Errorf("line %d %q lacks %q", c.line, lines[c.line], w)
			}
		}
	}
}

func TestFormatTableMarkdown(t *testing.T) {
	var b bytes.Buffer
	if err := FormatTable(&b, sampleResults()[:2], true); err != nil {
		t.Fatal(err)
	}
	want := "| workload | system | rate | unit | fl/x rate | p50 | p99 | fl/x p99 | errors | details |\n" +
		"|---|---|---|---|---|---|---|---|---|---|\n" +
		"| w1 | fencelock | 12000 | cycles/s | 1.00× | 2.00ms | 5.00ms | 1.00× | 0 |  |\n" +
		"| w1 | redis | 10000 | cycles/s | 1.20× | 3.00ms | 10.0ms | 0.50× | 0 |  |\n"
	if b.String() != want {
		t.Errorf("markdown:\n%s\nwant:\n%s", b.String(), want)
	}
}

func TestFmtDur(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0:                       "—",
		450 * time.Microsecond:  "450µs",
		1234 * time.Microsecond: "1.23ms",
		25 * time.Millisecond:   "25.0ms",
		1500 * time.Millisecond: "1.50s",
	} {
		if got := fmtDur(d); got != want {
			t.Errorf("fmtDur(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestMedianRound(t *testing.T) {
	rs := []Result{
		{System: "redis", Rate: 300},
		{System: "redis", Skipped: "failed: boom"},
		{System: "redis", Rate: 100},
		{System: "redis", Rate: 200},
	}
	m := MedianRound(rs)
	if m.Rate != 200 || m.Rounds != 3 || m.RateMin != 100 || m.RateMax != 300 {
		t.Errorf("MedianRound = rate %v, %d rounds, %v–%v; want 200, 3, 100–300", m.Rate, m.Rounds, m.RateMin, m.RateMax)
	}
	if m := MedianRound(rs[2:]); m.Rate != 100 {
		t.Errorf("even count: median rate %v, want the lower middle 100", m.Rate)
	}
	if m := MedianRound(rs[1:2]); m.Skipped == "" {
		t.Error("all skipped: the skip is lost")
	}
	if m := MedianRound(rs); !strings.Contains(details(m), "median of 3 rounds (rate 100–300, p99 —–—)") {
		t.Errorf("details %q lack the spread", details(m))
	}
}

func TestMedianRoundTiesByP99(t *testing.T) {
	rs := []Result{
		{Rate: 2000, Latency: Summary{P99: 30 * time.Millisecond}},
		{Rate: 2000, Latency: Summary{P99: 10 * time.Millisecond}},
		{Rate: 2000, Latency: Summary{P99: 20 * time.Millisecond}},
	}
	if m := MedianRound(rs); m.Latency.P99 != 20*time.Millisecond {
		t.Errorf("median p99 = %v, want 20ms", m.Latency.P99)
	}
}
