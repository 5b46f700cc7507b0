package peerbench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"
)

// runW3 takes W3Leases leases of W3TTL each, then extends every one of them
// at TTL/3 on a fixed schedule for the measured window. The schedule is open
// loop: a slow extend delays the sends behind it, and that delay is reported
// as MaxLag and Late rather than hidden.
func runW3(ctx context.Context, sys System, p Params) (Result, error) {
	return runKeepAlive(ctx, sys, p, keepAlive{workload: W3, n: p.W3Leases, ttl: p.W3TTL, workers: p.W3Workers, take: hold})
}

// hold takes key as a lease of its own (Client.Hold).
func hold(ctx context.Context, c Client, key string, ttl time.Duration) (Lease, error) {
	return c.Hold(ctx, key, ttl)
}

// keepAlive is what W3 and W5 share: n leases (or sessions) of ttl, taken
// by workers clients, then each extended every ttl/3.
type keepAlive struct {
	workload Workload
	n        int
	ttl      time.Duration
	workers  int
	take     func(ctx context.Context, c Client, key string, ttl time.Duration) (Lease, error)
	// window, when set, is called at the start of the measured window
	// and returns what to call at its end.
	window func() (end func())
}

func runKeepAlive(ctx context.Context, sys System, p Params, ka keepAlive) (Result, error) {
	res := Result{System: sys.Name(), Workload: ka.workload}
	cs, err := openClients(ctx, sys, ka.workers)
	if err != nil {
		return res, err
	}
	defer closeClients(cs)

	// Take the leases: worker w holds leases w, w+W, w+2W...
	setupStart := time.Now()
	held, errs := holdMany(ctx, cs, ka.n, p.KeyPrefix+"/"+string(ka.workload)+"/", ka.ttl, ka.take)
	defer releaseAll(ctx, held)
	if skipped, err := holdOutcome(ctx, sys, ka.workload, errs); skipped != "" || err != nil {
		res.Skipped = skipped
		return res, err
	}
	setup := time.Since(setupStart)
	period := ka.ttl / 3
	// Every lease's first extend is due within one period of the end of the
	// setup, so the earliest lease lives long enough iff setup+period < TTL.
	if setup+period >= ka.ttl-time.Second {
		return res, fmt.Errorf("peerbench: %s: %s: taking %d leases took %v; with TTL %v the first could lapse before its first extend: raise the ttl",
			sys.Name(), ka.workload, ka.n, setup.Round(time.Millisecond), ka.ttl)
	}

	start := time.Now()
	from, end := start.Add(p.Warmup), start.Add(p.Warmup+p.Duration)
	if ka.window != nil {
		done := make(chan struct{})
		defer func() { <-done }()
		go func() {
			defer close(done)
			pause(ctx, time.Until(from))
			finish := ka.window()
			pause(ctx, time.Until(end))
			finish()
		}()
	}
	recs := make([]*recorder, len(cs))
	lags := make([]time.Duration, len(cs))
	lates := make([]int64, len(cs))
	var wg sync.WaitGroup
	for w := range cs {
		rec := &recorder{from: from}
		recs[w] = rec
		wg.Go(func() {
			mine := held[w]
			confirmed := make([]time.Time, len(mine)) // send time of the last confirmed extend
			for round := 0; ctx.Err() == nil; round++ {
				for j, l := range mine {
					// Lease i = w + j*W is due at offset i/N of each period,
					// which spreads the sends evenly over the period.
					i := w + j*len(cs)
					due := start.Add(time.Duration(round)*period + period*time.Duration(i)/time.Duration(ka.n))
					if !due.Before(end) {
						return
					}
					if d := time.Until(due); d > 0 {
						pause(ctx, d)
						if ctx.Err() != nil {
							return
						}
					}
					t := time.Now()
					if !due.Before(from) {
						lags[w] = max(lags[w], t.Sub(due))
					}
					ectx, cancel := context.WithTimeout(ctx, opTimeout)
					err := l.Extend(ectx)
					cancel()
					if err != nil {
						rec.fail(due, err)
						continue
					}
					if !confirmed[j].IsZero() && t.Sub(confirmed[j]) > ka.ttl/2 && !due.Before(from) {
						lates[w]++
					}
					confirmed[j] = t
					rec.add(due, time.Since(t))
				}
			}
		})
	}
	wg.Wait()
	res = finish(res, recs, from, end)
	k := &KeepAlive{Leases: ka.n, Offered: float64(ka.n) / period.Seconds(), Setup: setup}
	for w := range cs {
		k.MaxLag = max(k.MaxLag, lags[w])
		k.Late += lates[w]
	}
	res.KeepAlive = k
	return res, ctx.Err()
}

// releaseAll gives the leases back in parallel, best effort: whatever is
// not released expires with its TTL, and keys are unique to the run.
// holdMany takes n leases of ttl on keys prefix0, prefix1, ...: worker w
// holds leases w, w+W, w+2W... and stops at its first error. It returns
// each worker's leases and error.
func holdMany(ctx context.Context, cs []Client, n int, prefix string, ttl time.Duration,
	take func(context.Context, Client, string, time.Duration) (Lease, error)) ([][]Lease, []error) {
	held := make([][]Lease, len(cs))
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	for w, c := range cs {
		wg.Go(func() {
			for i := w; i < n && ctx.Err() == nil; i += len(cs) {
				hctx, cancel := context.WithTimeout(ctx, opTimeout)
				l, err := take(hctx, c, prefix+strconv.Itoa(i), ttl)
				cancel()
				if err != nil {
					errs[w] = err
					return
				}
				held[w] = append(held[w], l)
			}
		})
	}
	wg.Wait()
	return held, errs
}

func releaseAll(ctx context.Context, held [][]Lease) {
	var wg sync.WaitGroup
	for _, ls := range held {
		wg.Go(func() {
			for _, l := range ls {
				if ctx.Err() != nil {
					return
				}
				rctx, cancel := context.WithTimeout(ctx, opTimeout)
				_ = l.Unlock(rctx)
				cancel()
			}
		})
	}
	wg.Wait()
}

// holdOutcome judges the setup phase of a workload that takes many leases
// at once: a system that cannot hold leases of its own is skipped (with the
// reason), any other failure or an ended ctx is an error.
func holdOutcome(ctx context.Context, sys System, w Workload, errs []error) (skipped string, err error) {
	if err := errors.Join(errs...); err != nil {
		if errors.Is(err, ErrNotSupported) {
			return firstErr(errs).Error(), nil
		}
		return "", fmt.Errorf("peerbench: %s: %s hold: %w", sys.Name(), w, err)
	}
	return "", ctx.Err()
}

func firstErr(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
