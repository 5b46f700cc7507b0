package peerbench

import (
	"slices"
	"time"
)

// Summary describes a set of latency samples.
type Summary struct {
	N             int
	P50, P99, Max time.Duration
}

// Summarize sorts samples in place and returns nearest-rank percentiles.
// An empty set gives the zero Summary.
func Summarize(samples []time.Duration) Summary {
	if len(samples) == 0 {
		return Summary{}
	}
	slices.Sort(samples)
	return Summary{
		N:   len(samples),
		P50: Percentile(samples, 50),
		P99: Percentile(samples, 99),
		Max: samples[len(samples)-1],
	}
}

// Percentile returns the nearest-rank p-th percentile (0 < p <= 100) of
// sorted samples: the smallest sample with at least p% of the samples at or
// below it. It returns 0 for an empty set.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	if p <= 0 {
		return sorted[0]
	}
	// rank = ceil(p/100 * n), computed in integers to avoid float edge cases
	// at exact boundaries (p99 of 100 samples is the 99th, not the 100th).
	rank := int((int64(p*1000)*int64(n) + 100*1000 - 1) / (100 * 1000))
	if rank < 1 {
		rank = 1
	}
	if rank > n {
		rank = n
	}
	return sorted[rank-1]
}

// recorder collects one worker's samples, dropping those taken during the
// warm-up and capping memory at maxSamples per worker.
type recorder struct {
	from    time.Time
	samples []time.Duration
	ops     int64
	errs    int64
	firstEr error
}

const maxSamples = 1 << 20

func (r *recorder) add(start time.Time, d time.Duration) {
	if start.Before(r.from) {
		return
	}
	r.ops++
	if len(r.samples) < maxSamples {
		r.samples = append(r.samples, d)
	}
}

func (r *recorder) fail(start time.Time, err error) {
	if start.Before(r.from) {
		return
	}
	r.errs++
	if r.firstEr == nil {
		r.firstEr = err
	}
}

func merge(rs []*recorder) (samples []time.Duration, ops, errs int64, first error) {
	for _, r := range rs {
		samples = append(samples, r.samples...)
		ops += r.ops
		errs += r.errs
		if first == nil {
			first = r.firstEr
		}
	}
	return samples, ops, errs, first
}
