package peerbench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"
)

// sentAter is a lease that knows when its granted request left the client.
type sentAter interface{ SentAt() time.Time }

// Workload names one of issue 7's workloads.
type Workload string

// The workloads. W4 and W5 take minutes and are run only when asked for.
const (
	W1 Workload = "w1" // uncontended acquire+release cycles
	W2 Workload = "w2" // one contended key, FIFO hand-offs
	W3 Workload = "w3" // many held leases extended at TTL/3
	W4 Workload = "w4" // scale: memory per held lock
	W5 Workload = "w5" // Chubby scale: many sessions kept alive, server CPU and memory
)

// Workloads lists the names Run accepts, in table order.
var Workloads = []Workload{W1, W2, W3, W4, W5}

// Params size the workloads. Zero fields take the defaults of issue 7.
type Params struct {
	Duration time.Duration // measured time per workload; default 10s
	Warmup   time.Duration // run but not measured, before Duration; default 1s

	W1Clients int // default 32
	W1Keys    int // default 10,000, split between clients so no two contend

	W2Clients int           // default 8
	W2Hold    time.Duration // time a holder keeps the lock; default 0
	W2Slack   time.Duration // start-time ties not counted as overtakes; default 2ms

	W3Leases  int           // default 10,000
	W3TTL     time.Duration // default 15s; extends are due every W3TTL/3
	W3Workers int           // clients sending extends; default 32

	W4Locks   int // default 1,000,000
	W4Workers int // default 32
	// W4PID is the server's process id, read for RSS (W4, W5) and CPU
	// (W5). 0: find the process
	// listening on the system's port through /proc.
	W4PID int
	// W4Keep leaves the W4 locks held (TTL 1h) so the server's restart time
	// can be measured with them in place (bench/peers/restart-time.sh).
	W4Keep bool

	W5Sessions int           // default 100,000
	W5TTL      time.Duration // default 30s; extends are due every W5TTL/3
	W5Workers  int           // clients opening and extending sessions; default 32

	// KeyPrefix keeps runs apart; default "flbench/<unix nanos>".
	KeyPrefix string
}

func (p Params) withDefaults() Params {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	defD := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	defD(&p.Duration, 10*time.Second)
	if p.Warmup < 0 {
		p.Warmup = 0
	} else if p.Warmup == 0 {
		p.Warmup = time.Second
	}
	def(&p.W1Clients, 32)
	def(&p.W1Keys, 10000)
	def(&p.W2Clients, 8)
	defD(&p.W2Slack, 2*time.Millisecond)
	def(&p.W3Leases, 10000)
	defD(&p.W3TTL, 15*time.Second)
	def(&p.W3Workers, 32)
	def(&p.W5Sessions, 100000)
	defD(&p.W5TTL, 30*time.Second)
	def(&p.W5Workers, 32)
	def(&p.W4Locks, 1000000)
	def(&p.W4Workers, 32)
	if p.KeyPrefix == "" {
		p.KeyPrefix = "flbench/" + strconv.FormatInt(time.Now().UnixNano(), 36)
	}
	return p
}

// Result is one system's run of one workload.
type Result struct {
	System   string
	Workload Workload
	// Skipped, when set, says why the system did not run this workload;
	// the other fields are then empty.
	Skipped string

	Elapsed time.Duration // measured window
	Ops     int64         // completed operations in the window
	// Rate is the workload's headline rate: W1 cycles/s, W2 hand-offs/s,
	// W3 and W5 extends/s, W4 locks taken per second while filling.
	Rate    float64
	Latency Summary // W1 cycle, W2 wait for the grant, W3 extend round trip

	Errors     int64
	FirstError string

	Fairness *Fairness // W2
	// FairnessBySend orders W2 waits by when the request was written to
	// the socket rather than when the client began, where the driver can
	// tell (fencelock's HTTP trace). It tells client-side delays before
	// the send from overtakes at the server.
	FairnessBySend *Fairness
	KeepAlive      *KeepAlive // W3, W5
	Server         *ServerUse // W5
	Scale          *Scale     // W4

	// Rounds > 1 when this is the median of several runs (MedianRound);
	// RateMin and RateMax are then the spread of Rate across them.
	Rounds           int
	RateMin, RateMax float64
	P99Min, P99Max   time.Duration
}

// MedianRound returns the run with the median Rate (ties by p99) among rounds
// of one system and workload (the lower middle one for an even count), annotated
// with the spread. On a shared machine one run says little: the median of
// rounds run in rotating order is what the table shows. Skipped runs are
// ignored unless all were skipped.
func MedianRound(rounds []Result) Result {
	var ran []Result
	for _, r := range rounds {
		if r.Skipped == "" {
			ran = append(ran, r)
		}
	}
	if len(ran) == 0 {
		if len(rounds) == 0 {
			return Result{}
		}
		return rounds[0]
	}
	// W3's rate is the offered schedule's whenever the system keeps up, so
	// equal rates are ordered by p99, which is then what varies.
	slices.SortStableFunc(ran, func(a, b Result) int {
		return cmp.Or(cmp.Compare(a.Rate, b.Rate), cmp.Compare(a.Latency.P99, b.Latency.P99))
	})
	m := ran[(len(ran)-1)/2]
	m.Rounds = len(ran)
	m.RateMin, m.RateMax = ran[0].Rate, ran[len(ran)-1].Rate
	m.P99Min, m.P99Max = ran[0].Latency.P99, ran[0].Latency.P99
	for _, r := range ran {
		m.P99Min, m.P99Max = min(m.P99Min, r.Latency.P99), max(m.P99Max, r.Latency.P99)
	}
	return m
}

// KeepAlive details W3.
type KeepAlive struct {
	Leases  int
	Offered float64       // extends/s the schedule asks for: Leases / (TTL/3)
	MaxLag  time.Duration // worst delay of a send behind its due time
	// Late counts extends sent more than TTL/2 after the lease's previous
	// confirmed extend: a client with safe-stop would have given up.
	Late  int64
	Setup time.Duration // time to take all the leases
}

// Scale details W4.
type Scale struct {
	Locks         int
	RSSBefore     int64 // server resident bytes before taking the locks
	RSSAfter      int64
	BytesPerLock  float64
	SnapshotBytes int64 // -1 when unknown
	Setup         time.Duration
}

// Run executes one workload against sys. It returns an error only when the
// workload could not be set up; failed operations are counted in the Result.
func Run(ctx context.Context, sys System, w Workload, p Params) (Result, error) {
	p = p.withDefaults()
	switch w {
	case W1:
		return runW1(ctx, sys, p)
	case W2:
		return runW2(ctx, sys, p)
	case W3:
		return runW3(ctx, sys, p)
	case W5:
		return runW5(ctx, sys, p)
	case W4:
		return runW4(ctx, sys, p)
	}
	return Result{}, fmt.Errorf("peerbench: unknown workload %q (known: w1, w2, w3, w4, w5)", w)
}

// openClients opens n clients in parallel and closes them all on error.
func openClients(ctx context.Context, sys System, n int) ([]Client, error) {
	cs := make([]Client, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range cs {
		wg.Go(func() { cs[i], errs[i] = sys.NewClient(ctx, i) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		closeClients(cs)
		return nil, fmt.Errorf("peerbench: %s: open clients: %w", sys.Name(), err)
	}
	return cs, nil
}

func closeClients(cs []Client) {
	for _, c := range cs {
		if c != nil {
			c.Close()
		}
	}
}

// opTimeout bounds one operation that is not meant to wait (a release, an
// uncontended acquire), so a stuck peer cannot hang the run.
const opTimeout = 10 * time.Second

func runW1(ctx context.Context, sys System, p Params) (Result, error) {
	res := Result{System: sys.Name(), Workload: W1}
	keys := make([]string, p.W1Keys)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s/w1/%d", p.KeyPrefix, i)
	}
	if pr, ok := sys.(Preparer); ok {
		if err := pr.Prepare(ctx, keys); err != nil {
			return res, fmt.Errorf("peerbench: %s: w1 prepare: %w", sys.Name(), err)
		}
	}
	cs, err := openClients(ctx, sys, p.W1Clients)
	if err != nil {
		return res, err
	}
	defer closeClients(cs)

	start := time.Now()
	from, end := start.Add(p.Warmup), start.Add(p.Warmup+p.Duration)
	recs := make([]*recorder, len(cs))
	var wg sync.WaitGroup
	for id, c := range cs {
		rec := &recorder{from: from}
		recs[id] = rec
		wg.Go(func() {
			// Client id owns keys id, id+n, id+2n...: nobody contends.
			for k := id; ctx.Err() == nil; k += len(cs) {
				if k >= len(keys) {
					k = id
				}
				t := time.Now()
				if !t.Before(end) {
					return
				}
				if err := cycle(ctx, c, keys[k]); err != nil {
					rec.fail(t, err)
					pause(ctx, 10*time.Millisecond) // no hot loop against a failing peer
					continue
				}
				rec.add(t, time.Since(t))
			}
		})
	}
	wg.Wait()
	return finish(res, recs, from, end), ctx.Err()
}

func cycle(ctx context.Context, c Client, key string) error {
	octx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	l, err := c.Lock(octx, key)
	if err != nil {
		return err
	}
	return l.Unlock(octx)
}

func finish(res Result, recs []*recorder, from, end time.Time) Result {
	samples, ops, errs, first := merge(recs)
	res.Elapsed = end.Sub(from)
	if now := time.Now(); now.Before(end) { // cancelled early
		res.Elapsed = now.Sub(from)
	}
	res.Ops, res.Errors = ops, errs
	if first != nil {
		res.FirstError = first.Error()
	}
	res.Latency = Summarize(samples)
	if res.Elapsed > 0 {
		res.Rate = float64(ops) / res.Elapsed.Seconds()
	}
	return res
}

func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func runW2(ctx context.Context, sys System, p Params) (Result, error) {
	res := Result{System: sys.Name(), Workload: W2}
	key := p.KeyPrefix + "/w2"
	if pr, ok := sys.(Preparer); ok {
		if err := pr.Prepare(ctx, []string{key}); err != nil {
			return res, fmt.Errorf("peerbench: %s: w2 prepare: %w", sys.Name(), err)
		}
	}
	cs, err := openClients(ctx, sys, p.W2Clients)
	if err != nil {
		return res, err
	}
	defer closeClients(cs)

	start := time.Now()
	from, end := start.Add(p.Warmup), start.Add(p.Warmup+p.Duration)
	// Waiting ends at end: a waiter still queued then is cancelled, which
	// also exercises every recipe's clean-up of an abandoned wait.
	wctx, cancel := context.WithDeadline(ctx, end)
	defer cancel()
	recs := make([]*recorder, len(cs))
	waits := make([][]Wait, len(cs))
	sent := make([][]Wait, len(cs))
	var wg sync.WaitGroup
	for id, c := range cs {
		rec := &recorder{from: from}
		recs[id] = rec
		wg.Go(func() {
			for wctx.Err() == nil {
				t := time.Now()
				l, err := c.Lock(wctx, key)
				if err != nil {
					if wctx.Err() == nil {
						rec.fail(t, err)
						pause(wctx, 10*time.Millisecond)
					}
					continue
				}
				g := time.Now()
				if !t.Before(from) {
					waits[id] = append(waits[id], Wait{Client: id, Start: t, Granted: g})
					if s, ok := l.(sentAter); ok && !s.SentAt().IsZero() {
						sent[id] = append(sent[id], Wait{Client: id, Start: s.SentAt(), Granted: g})
					}
				}
				rec.add(t, g.Sub(t))
				if p.W2Hold > 0 {
					pause(ctx, p.W2Hold)
				}
				uctx, ucancel := context.WithTimeout(ctx, opTimeout)
				if err := l.Unlock(uctx); err != nil {
					rec.fail(t, fmt.Errorf("unlock: %w", err))
				}
				ucancel()
			}
		})
	}
	wg.Wait()
	res = finish(res, recs, from, end)
	var all []Wait
	for _, ws := range waits {
		all = append(all, ws...)
	}
	f := MeasureFairness(all, p.W2Slack)
	res.Fairness = &f
	var allSent []Wait
	for _, ws := range sent {
		allSent = append(allSent, ws...)
	}
	if len(allSent) == len(all) && len(all) > 0 {
		fs := MeasureFairness(allSent, p.W2Slack)
		res.FairnessBySend = &fs
	}
	res.Rate = 0
	if res.Elapsed > 0 {
		res.Rate = float64(f.HandOffs) / res.Elapsed.Seconds()
	}
	return res, ctx.Err()
}

// RunSystem opens the named system, runs one workload on it and closes it:
// the whole of what 'fencelock-bench run --system NAME' needs.
func RunSystem(ctx context.Context, name string, w Workload, o Options, p Params) (Result, error) {
	if o.Clients <= 0 {
		pp := p.withDefaults()
		o.Clients = max(pp.W1Clients, pp.W2Clients, pp.W3Workers, pp.W4Workers, pp.W5Workers)
	}
	sys, err := Open(ctx, name, o)
	if err != nil {
		return Result{}, err
	}
	defer sys.Close()
	return Run(ctx, sys, w, p)
}
