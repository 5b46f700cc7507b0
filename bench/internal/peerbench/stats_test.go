package peerbench

import (
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	ms := func(ns ...int) []time.Duration {
		out := make([]time.Duration, len(ns))
		for i, n := range ns {
			out[i] = time.Duration(n) * time.Millisecond
		}
		return out
	}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = i + 1
	}
	tests := []struct {
		name    string
		samples []time.Duration
		p       float64
		want    time.Duration
	}{
		{"empty", nil, 50, 0},
		{"one", ms(7), 99, 7 * time.Millisecond},
		{"p50 of 1..100 is the 50th", ms(hundred...), 50, 50 * time.Millisecond},
		{"p99 of 1..100 is the 99th, not the max", ms(hundred...), 99, 99 * time.Millisecond},
		{"p100 is the max", ms(hundred...), 100, 100 * time.Millisecond},
		{"p99 of 10 samples is the max", ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 99, 10 * time.Millisecond},
		{"p50 of 4 samples rounds up to the 2nd", ms(1, 2, 3, 4), 50, 2 * time.Millisecond},
		{"p0 is the min", ms(3, 4), 0, 3 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Percentile(tt.samples, tt.p); got != tt.want {
				t.Errorf("Percentile(p%v) = %v, want %v", tt.p, got, tt.want)
			}
		})
	}
}

func TestSummarizeSorts(t *testing.T) {
	s := Summarize([]time.Duration{5, 1, 4, 2, 3})
	want := Summary{N: 5, P50: 3, P99: 5, Max: 5}
	if s != want {
		t.Errorf("Summarize = %+v, want %+v", s, want)
	}
	if (Summarize(nil) != Summary{}) {
		t.Error("Summarize(nil) is not the zero Summary")
	}
}

func TestRecorderDropsWarmup(t *testing.T) {
	t0 := time.Unix(1000, 0)
	r := &recorder{from: t0}
	r.add(t0.Add(-time.Millisecond), time.Second) // warm-up: dropped
	r.add(t0, 2*time.Second)
	r.fail(t0.Add(-time.Millisecond), errTest)
	r.fail(t0.Add(time.Millisecond), errTest)
	samples, ops, errs, first := merge([]*recorder{r, {from: t0}})
	if ops != 1 || errs != 1 || len(samples) != 1 || samples[0] != 2*time.Second || first != errTest {
		t.Errorf("merge = %v, %d ops, %d errs, %v", samples, ops, errs, first)
	}
}

var errTest = errorString("test")

type errorString string

func (e errorString) Error() string { return string(e) }
