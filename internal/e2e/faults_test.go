//go:build unix

package e2e

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/fencelock/fencelock/client"
)

// The fault runs. A run: a fresh cluster; workers with their own clients
// (every node's address) running a seeded mix of acquire, wait, extend,
// release, check and get on a few shared keys; a lease held by
// client.Lease with its keep-alive running; an expiry prober; one fault
// of the run's class; the faults heal; final reads; every check.
//
// Without -runs the short plan runs (CI): each class once on 3 nodes and
// leader-kill once on 5. A campaign:
//
//	go test ./internal/e2e -run TestFaults -v -timeout 0 -runs 200 -class leader-kill -nodes 3,5
//
// The seed is fixed (defaultSeed) unless -seed or FENCELOCK_E2E_SEED
// names another, so a plain go test makes the same choices every time. A
// failing run prints its seed; -seed S -runs 1 -class C -nodes N replays
// its choices (the fault times, the victims, the op mix; process timing
// is the machine's).
//
// The short plan's runs go in parallel (up to -parallel at once); a
// campaign's runs go one at a time, so that the unavailability figures it
// collects are not those of runs crowding each other.

const (
	defaultSeed = 1
	envSeed     = "FENCELOCK_E2E_SEED"
)

var (
	flagSeed     = flag.Int64("seed", defaultSeed, "seed of the first run (run i uses seed+i); without -seed, $"+envSeed+" if set")
	flagRuns     = flag.Int("runs", 0, "runs per class and cluster size; 0: the short plan")
	flagClass    = flag.String("class", "", "fault classes, comma-separated (default all): "+strings.Join(classNames(), ","))
	flagNodes    = flag.String("nodes", "", "cluster sizes, comma-separated (default 3, and 5 for leader-kill in the short plan)")
	flagWorkers  = flag.Int("workers", 4, "concurrent clients per run")
	flagLoad     = flag.Duration("load", 1200*time.Millisecond, "load before the fault and after it heals (each drawn from [load/2, load))")
	flagDown     = flag.Duration("down", 1500*time.Millisecond, "how long a killed node stays down (drawn from [down/3, down))")
	flagLeaseTTL = flag.Duration("lease-ttl", 15*time.Second, "TTL of the lease held through the fault by client.Lease")
	flagSummary  = flag.String("summary", "", "append the per-class summary (markdown) to this file")
)

const (
	linTTL    = time.Minute // the linearizability keys never expire within a run
	expiryTTL = time.Second // the expiry prober's short leases
	opTimeout = 15 * time.Second
)

type class struct {
	name     string
	netns    bool
	majority bool // a majority stays up throughout
	inject   func(r *run) error
}

var classes = []class{
	{"leader-kill", false, true, faultKill(func(r *run) *node { return r.c.leader(60 * time.Second) })},
	{"random-kill", false, true, faultKill(func(r *run) *node { return r.c.nodes[r.rng.IntN(len(r.c.nodes))] })},
	{"all-kill", false, false, faultKillAll},
	{"leader-stop", false, true, faultStop},
	{"partition", true, true, faultPartition},
	{"silent-partition", true, true, faultSilence(false)},
	{"silent-leader", true, true, faultSilence(true)},
	{"membership", false, true, faultMembership},
}

func classNames() []string {
	var out []string
	for _, c := range classes {
		out = append(out, c.name)
	}
	return out
}

type plan struct {
	class class
	size  int
	runs  int
}

func plans(t *testing.T) []plan {
	var chosen []class
	if *flagClass == "" {
		chosen = classes
	} else {
		for _, name := range strings.Split(*flagClass, ",") {
			i := slices.IndexFunc(classes, func(c class) bool { return c.name == strings.TrimSpace(name) })
			if i < 0 {
				t.Fatalf("-class %q: want one of %s", name, strings.Join(classNames(), ","))
			}
			chosen = append(chosen, classes[i])
		}
	}
	var sizes []int
	for _, s := range strings.Split(*flagNodes, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 3 {
			t.Fatalf("-nodes %q: want sizes of 3 or more", *flagNodes)
		}
		sizes = append(sizes, n)
	}
	var out []plan
	for _, c := range chosen {
		switch {
		case len(sizes) > 0:
			for _, n := range sizes {
				out = append(out, plan{c, n, max(*flagRuns, 1)})
			}
		case *flagRuns > 0:
			out = append(out, plan{c, 3, *flagRuns})
		default:
			out = append(out, plan{c, 3, 1})
			if c.name == "leader-kill" {
				out = append(out, plan{c, 5, 1})
			}
		}
	}
	return out
}

// result is what one run measured.
type result struct {
	ops        int
	violations []Violation
	unavail    time.Duration // fault to the first successful write; -1: none seen
	took       time.Duration
	skipped    string
}

// suiteSeed is the seed of the fault runs: -seed if given, else
// $FENCELOCK_E2E_SEED if set, else defaultSeed.
func suiteSeed(t *testing.T) int64 {
	t.Helper()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "seed" })
	if v := os.Getenv(envSeed); v != "" && !given {
		seed, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: want an integer", envSeed, v)
		}
		return seed
	}
	return *flagSeed
}

func TestFaults(t *testing.T) {
	fencelockBinary(t)
	t.Parallel()
	seed := suiteSeed(t)
	t.Logf("seed %d", seed)
	var rows []*row
	for _, p := range plans(t) {
		// Each run writes its own slot, so parallel runs share nothing.
		rw := &row{plan: p, results: make([]result, p.runs)}
		rows = append(rows, rw)
		for i := range p.runs {
			s := seed + int64(i)
			res := &rw.results[i]
			*res = result{skipped: "not run (-run)"}
			name := fmt.Sprintf("%s/n%d/seed=%d", p.class.name, p.size, s)
			t.Run(name, func(t *testing.T) {
				if *flagRuns == 0 {
					t.Parallel()
				}
				t.Cleanup(func() {
					if t.Failed() {
						t.Logf("seed %d; replay: go test ./internal/e2e -run 'TestFaults/%s/n%d/' -v -class %s -nodes %d -seed %d -runs 1",
							s, p.class.name, p.size, p.class.name, p.size, s)
					}
				})
				// A run that stops early (a cluster that never healed, say)
				// counts, as a violation.
				*res = result{unavail: -1, violations: []Violation{{"harness", "run aborted"}}}
				if p.class.netns {
					if why := netnsUnavailable(); why != "" {
						*res = result{skipped: why}
						t.Skipf("skipping %s: %s", p.class.name, why)
					}
				}
				*res = runOnce(t, p.class, p.size, s)
				for _, v := range res.violations {
					t.Errorf("%v", v)
				}
				un := "-"
				if res.unavail >= 0 {
					un = res.unavail.Round(time.Millisecond).String()
				}
				t.Logf("%s n=%d seed=%d: %d ops, %d violations, unavailable %s, run took %v",
					p.class.name, p.size, s, res.ops, len(res.violations), un, res.took.Round(time.Millisecond))
			})
		}
	}
	// After the last run, parallel or not.
	t.Cleanup(func() { summarize(t, seed, rows) })
}

// row is one plan's results, a slot per run.
type row struct {
	plan
	results []result
}

// summarize prints the per-class table and appends it to -summary.
func summarize(t *testing.T, seed int64, rows []*row) {
	var b strings.Builder
	fmt.Fprintf(&b, "| class | nodes | runs | operations | violations | unavailable after the fault: min / median / max | run time: median |\n|---|---|---|---|---|---|---|\n")
	for _, rw := range rows {
		var ops, viol, done int
		var un, took []time.Duration
		skipped := ""
		for _, r := range rw.results {
			if r.skipped != "" {
				skipped = r.skipped
				continue
			}
			done++
			ops += r.ops
			viol += len(r.violations)
			if r.unavail >= 0 {
				un = append(un, r.unavail)
			}
			took = append(took, r.took)
		}
		if done == 0 && skipped != "" {
			fmt.Fprintf(&b, "| %s | %d | skipped: %s | | | | |\n", rw.class.name, rw.size, skipped)
			continue
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %s | %s |\n", rw.class.name, rw.size, done, ops, viol, spread(un), median(took))
	}
	fmt.Printf("fault suite, seed %d:\n%s", seed, b.String())
	if *flagSummary != "" {
		f, err := os.OpenFile(*flagSummary, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			t.Error(err)
			return
		}
		fmt.Fprintf(f, "seed %d\n\n%s\n", seed, b.String())
		f.Close()
	}
}

func sorted(ds []time.Duration) []time.Duration {
	ds = slices.Clone(ds)
	slices.Sort(ds)
	return ds
}

func median(ds []time.Duration) string {
	if len(ds) == 0 {
		return "-"
	}
	return sorted(ds)[len(ds)/2].Round(10 * time.Millisecond).String()
}

func spread(ds []time.Duration) string {
	if len(ds) == 0 {
		return "-"
	}
	s := sorted(ds)
	r := func(d time.Duration) string { return d.Round(10 * time.Millisecond).String() }
	return fmt.Sprintf("%s / %s / %s", r(s[0]), r(s[len(s)/2]), r(s[len(s)-1]))
}

// run is one fault run in progress.
type run struct {
	t       *testing.T
	c       *cluster
	rng     *rand.Rand // the fault's choices
	rec     *Recorder
	lease   *client.Lease
	faultAt time.Duration
	healAt  time.Duration
	errs    chan Violation
}

func (r *run) logf(format string, args ...any) {
	r.t.Helper()
	r.t.Logf("%v: %s", r.rec.Since().Round(time.Millisecond), fmt.Sprintf(format, args...))
}

// mark records that the fault starts now.
func (r *run) mark() { r.faultAt = r.rec.Since() }

// holdFault keeps a fault on until the lease's keep-alive has had to deal
// with it: until an extension sent after the fault was confirmed, or the
// lease was lost, bounded by the lease's TTL. A fault shorter than that
// proves nothing about the keep-alive.
func (r *run) holdFault() {
	deadline := time.Now().Add(r.lease.TTL())
	for r.lease.Err() == nil && r.leaseSent(r.lease) < r.faultAt && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
}

func (r *run) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(r.rng.Int64N(int64(hi-lo)+1))
}

func (r *run) sleep(lo, hi time.Duration) { time.Sleep(r.between(lo, hi)) }

func (r *run) violate(check, format string, args ...any) {
	select {
	case r.errs <- Violation{check, fmt.Sprintf(format, args...)}:
	default:
	}
}

func runOnce(t *testing.T, cl class, size int, seed int64) result {
	fencelockBinary(t)
	began := time.Now()
	c := startCluster(t, size, cl.netns)
	t.Logf("cluster of %d ready after %v", size, time.Since(began).Round(time.Millisecond))
	r := &run{t: t, c: c, rng: rand.New(rand.NewPCG(uint64(seed), 0x6661756c74)), rec: NewRecorder(), errs: make(chan Violation, 100)}
	keys := []string{"k0", "k1", "k2"}
	addrs := c.addrs()

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range *flagWorkers {
		wseed := r.rng.Uint64()
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.worker(w, addrs, keys, rand.New(rand.NewPCG(wseed, uint64(w))), stop)
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		r.expiryProber(*flagWorkers, addrs, stop)
	}()

	// The lease held through the fault.
	lc, err := client.New(addrs)
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	lin := Input{Kind: Acquire, Key: "lease", Holder: "leaseholder", TTL: *flagLeaseTTL, Expires: true}
	lid := r.rec.Start(*flagWorkers+1, lin)
	actx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	lease, err := lc.Acquire(actx, "lease", client.WithTTL(*flagLeaseTTL), client.WithHolder("leaseholder"))
	cancel()
	if err != nil {
		r.rec.End(lid, Output{})
		t.Fatalf("acquiring the lease: %v", err)
	}
	r.rec.End(lid, Output{Result: OK, Token: lease.Token()})
	r.lease = lease

	r.sleep(*flagLoad/2, *flagLoad)
	r.faultAt = r.rec.Since() // inject moves it to the fault itself
	if err := cl.inject(r); err != nil {
		t.Fatalf("injecting %s: %v", cl.name, err)
	}
	r.healAt = r.rec.Since()
	if c.waitLeader(nil, 60*time.Second) == nil {
		// The cluster never came back: that is the finding; the other
		// checks need a cluster to read.
		close(stop)
		wg.Wait()
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = lease.Release(rctx) // stops its keep-alive
		cancel()
		close(r.errs)
		res := result{unavail: -1, ops: len(r.rec.Ops()), took: time.Since(began)}
		for v := range r.errs {
			res.violations = append(res.violations, v)
		}
		res.violations = append(res.violations, Violation{"availability", fmt.Sprintf("no ready leader within 60s after %s healed (at %v)", cl.name, r.healAt.Round(time.Millisecond))})
		return res
	}
	r.logf("fault at %v, healed at %v", r.faultAt, r.healAt)

	// Load until a write after the heal succeeded, the lease's keep-alive
	// has confirmed an extension sent after the fault, and then a little
	// more; each wait bounded.
	deadline := time.Now().Add(60 * time.Second)
	for firstWrite(r.rec.Ops(), r.healAt) < 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	crossDeadline := time.Now().Add(*flagLeaseTTL)
	for lease.Err() == nil && r.leaseSent(lease) < r.faultAt && time.Now().Before(crossDeadline) {
		time.Sleep(20 * time.Millisecond)
	}
	r.logf("lease: last confirmed send at %v, err %v", r.leaseSent(lease), lease.Err())
	r.sleep(*flagLoad/2, *flagLoad)
	close(stop)
	wg.Wait()
	r.logf("load stopped")

	// The healed cluster: every node back, a ready leader, final reads.
	c.leader(60 * time.Second)
	final := r.finalReads(addrs, keys)
	r.logf("final reads: %+v", final)

	res := result{unavail: -1}
	// The lease: never lost while a majority was up, still the cluster's.
	lrec := LeaseRecord{Holder: "leaseholder", Token: lease.Token(), Lost: lease.Err(), Sent: r.leaseSent(lease), FaultAt: r.faultAt}
	if lrec.Lost == nil {
		for deadline := time.Now().Add(60 * time.Second); ; {
			gctx, cancel := context.WithTimeout(context.Background(), opTimeout)
			lk, err := lc.Get(gctx, "lease")
			cancel()
			if err == nil || errors.Is(err, client.ErrNotFound) {
				lrec.Final = Final{Found: err == nil, Holder: lk.Holder, Token: lk.Token}
				break
			}
			if time.Now().After(deadline) {
				res.violations = append(res.violations, Violation{"lease", fmt.Sprintf("no definite answer for the lease's key from the healed cluster: %v", err)})
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	if cl.majority {
		for _, v := range CheckLease(lrec) {
			v.Msg += fmt.Sprintf(" (%s: fault at %v, healed at %v)", cl.name, r.faultAt.Round(time.Millisecond), r.healAt.Round(time.Millisecond))
			res.violations = append(res.violations, v)
		}
	}
	rctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	_ = lease.Release(rctx)
	cancel()

	r.logf("lease released")
	ops := r.rec.Ops()
	res.ops = len(ops)
	res.unavail = firstWrite(ops, r.faultAt)
	close(r.errs)
	for v := range r.errs {
		res.violations = append(res.violations, v)
	}
	expiries := 0
	for _, o := range ops {
		if o.Input.Key == "exp" && o.Input.Kind == Wait && o.Output.Result == OK {
			expiries++
		}
	}
	checkStart := time.Now()
	lv := CheckLinearizable(ops, 2*time.Minute)
	r.logf("porcupine: %v on %d operations in %v; %d expiry hand-offs checked", lv.Result, lv.Ops, time.Since(checkStart).Round(time.Millisecond), expiries)
	switch lv.Result {
	case porcupine.Ok:
	case porcupine.Illegal:
		path := filepath.Join(os.TempDir(), fmt.Sprintf("fencelock-e2e-%s-n%d-seed%d.html", cl.name, size, seed))
		msg := fmt.Sprintf("history of %d operations is not linearizable", lv.Ops)
		if err := lv.Visualize(path); err == nil {
			msg += "; porcupine's view: " + path
		}
		res.violations = append(res.violations, Violation{"linearizable", msg})
		dump := filepath.Join(os.TempDir(), fmt.Sprintf("fencelock-e2e-%s-n%d-seed%d.txt", cl.name, size, seed))
		var b strings.Builder
		for _, o := range ops {
			fmt.Fprintln(&b, o)
		}
		if os.WriteFile(dump, []byte(b.String()), 0o644) == nil {
			t.Logf("history written to %s", dump)
		}
	default:
		res.violations = append(res.violations, Violation{"linearizable", fmt.Sprintf("porcupine could not decide within 2m on %d operations", lv.Ops)})
	}
	res.violations = append(res.violations, CheckTokens(ops)...)
	res.violations = append(res.violations, CheckHeld(ops, final)...)
	res.violations = append(res.violations, CheckExpiry(ops)...)
	res.took = time.Since(began)
	r.logf("checked")
	return res
}

// leaseSent is the send time of the lease's last confirmed grant or
// extension, on the recording clock.
func (r *run) leaseSent(l *client.Lease) time.Duration {
	return l.HeldUntil().Add(-l.TTL()).Sub(r.rec.start)
}

// firstWrite is how long after `after` the first write invoked then was
// answered successfully; -1 if none was.
func firstWrite(ops []Op, after time.Duration) time.Duration {
	best := time.Duration(-1)
	for _, o := range ops {
		if o.Call < after || o.Output.Result != OK {
			continue
		}
		switch o.Input.Kind {
		case Acquire, Wait, Extend:
		case Release:
			if !o.Output.Bool {
				continue
			}
		default:
			continue
		}
		if d := o.Return - after; best < 0 || d < best {
			best = d
		}
	}
	return best
}

// outcome maps a client error to the recorded result; refusal is the
// sentinel that means a definite "no".
func outcome(err error, refusal error) Result {
	switch {
	case err == nil:
		return OK
	case refusal != nil && errors.Is(err, refusal):
		return Refused
	}
	return Unknown
}

// unexpected reports answers that are neither a result nor a fault's
// ambiguity: the server refused a well-formed call, or reported a bug.
func (r *run) unexpected(op string, err error) {
	if errors.Is(err, client.ErrInvalid) || errors.Is(err, client.ErrInternal) {
		r.violate("api", "%s answered %v", op, err)
	}
}

func (r *run) worker(w int, addrs, keys []string, rng *rand.Rand, stop <-chan struct{}) {
	cl, err := client.New(addrs)
	if err != nil {
		r.violate("api", "client: %v", err)
		return
	}
	defer cl.Close()
	holder := fmt.Sprintf("w%d", w)
	held := map[string]uint64{}
	var seen []uint64
	anyToken := func() uint64 {
		if len(seen) == 0 || rng.IntN(4) == 0 {
			return uint64(rng.IntN(50) + 1)
		}
		return seen[rng.IntN(len(seen))]
	}
	for {
		select {
		case <-stop:
			return
		default:
		}
		key := keys[rng.IntN(len(keys))]
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		switch p := rng.IntN(100); {
		case p < 22: // acquire, try once
			in := Input{Kind: Acquire, Key: key, Holder: holder, TTL: linTTL}
			id := r.rec.Start(w, in)
			lk, err := cl.Grant(ctx, key, holder, linTTL, 0)
			res := outcome(err, client.ErrHeld)
			r.rec.End(id, Output{Result: res, Token: lk.Token})
			r.unexpected("acquire", err)
			if res == OK {
				held[key] = lk.Token
				seen = append(seen, lk.Token)
			} else if res == Unknown {
				delete(held, key)
			}
		case p < 36: // acquire with wait
			wait := time.Duration(100+rng.IntN(600)) * time.Millisecond
			cancel()
			ctx, cancel = context.WithTimeout(context.Background(), opTimeout+wait)
			id := r.rec.Wait(w, Input{Key: key, Holder: holder, TTL: linTTL})
			lk, err := cl.Grant(ctx, key, holder, linTTL, wait)
			res := outcome(err, client.ErrHeld)
			r.rec.EndWait(id, Output{Result: res, Token: lk.Token})
			r.unexpected("wait", err)
			if res == OK {
				held[key] = lk.Token
				seen = append(seen, lk.Token)
			} else {
				delete(held, key)
			}
		case p < 52: // extend: mostly our own, sometimes a wrong token
			tok, ok := held[key]
			if !ok || rng.IntN(5) == 0 {
				tok = anyToken()
			}
			id := r.rec.Start(w, Input{Kind: Extend, Key: key, Holder: holder, Token: tok, TTL: linTTL})
			_, err := cl.Extend(ctx, key, holder, tok, linTTL)
			r.rec.End(id, Output{Result: outcome(err, client.ErrNotHeld)})
			r.unexpected("extend", err)
		case p < 72: // release: mostly our own
			tok, ok := held[key]
			if !ok || rng.IntN(5) == 0 {
				tok = anyToken()
			}
			if rng.IntN(6) == 0 {
				tok = 0 // by holder alone
			}
			id := r.rec.Start(w, Input{Kind: Release, Key: key, Holder: holder, Token: tok})
			ok, err := cl.Release(ctx, key, holder, tok)
			res := outcome(err, nil)
			r.rec.End(id, Output{Result: res, Bool: ok})
			r.unexpected("release", err)
			if res != OK || ok {
				delete(held, key)
			}
		case p < 86: // check
			tok := anyToken()
			if t, ok := held[key]; ok && rng.IntN(2) == 0 {
				tok = t
			}
			id := r.rec.Start(w, Input{Kind: Check, Key: key, Token: tok})
			valid, err := cl.Check(ctx, key, tok)
			r.rec.End(id, Output{Result: outcome(err, nil), Bool: valid})
			r.unexpected("check", err)
		default: // get
			id := r.rec.Start(w, Input{Kind: Get, Key: key})
			lk, err := cl.Get(ctx, key)
			res := outcome(err, client.ErrNotFound)
			r.rec.End(id, Output{Result: res, Holder: lk.Holder, Token: lk.Token})
			r.unexpected("get", err)
			if res == OK {
				seen = append(seen, lk.Token)
			}
		}
		cancel()
		time.Sleep(time.Duration(5+rng.IntN(20)) * time.Millisecond)
	}
}

// expiryProber, in rounds on its own key: holder A takes a short lease and
// lets it expire; holder B waits for the key. CheckExpiry judges B's grant.
func (r *run) expiryProber(clientID int, addrs []string, stop <-chan struct{}) {
	cl, err := client.New(addrs)
	if err != nil {
		r.violate("api", "client: %v", err)
		return
	}
	defer cl.Close()
	for round := 0; ; round++ {
		select {
		case <-stop:
			return
		default:
		}
		a, b := fmt.Sprintf("expA%d", round), fmt.Sprintf("expB%d", round)
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		id := r.rec.Start(clientID, Input{Kind: Acquire, Key: "exp", Holder: a, TTL: expiryTTL, Expires: true})
		lk, err := cl.Grant(ctx, "exp", a, expiryTTL, 0)
		cancel()
		res := outcome(err, client.ErrHeld)
		r.rec.End(id, Output{Result: res, Token: lk.Token})
		r.unexpected("acquire", err)
		if res != OK {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		for {
			select {
			case <-stop:
				return
			default:
			}
			wait := 3 * expiryTTL
			ctx, cancel := context.WithTimeout(context.Background(), opTimeout+wait)
			id := r.rec.Wait(clientID, Input{Key: "exp", Holder: b, TTL: expiryTTL, Expires: true})
			lk, err := cl.Grant(ctx, "exp", b, expiryTTL, wait)
			cancel()
			res := outcome(err, client.ErrHeld)
			r.rec.EndWait(id, Output{Result: res, Token: lk.Token})
			r.unexpected("wait", err)
			if res == OK {
				break
			}
		}
		ctx, cancel = context.WithTimeout(context.Background(), opTimeout)
		id = r.rec.Start(clientID, Input{Kind: Release, Key: "exp", Holder: b, Expires: true})
		ok, err := cl.Release(ctx, "exp", b, 0)
		cancel()
		r.rec.End(id, Output{Result: outcome(err, nil), Bool: ok})
	}
}

// finalReads reads every key once the faults have healed, retrying until
// a definite answer; the reads join the history.
func (r *run) finalReads(addrs, keys []string) map[string]Final {
	cl, err := client.New(addrs)
	if err != nil {
		r.t.Fatal(err)
	}
	defer cl.Close()
	out := map[string]Final{}
	for _, key := range keys {
		deadline := time.Now().Add(60 * time.Second)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
			id := r.rec.Start(*flagWorkers+2, Input{Kind: Get, Key: key})
			lk, err := cl.Get(ctx, key)
			cancel()
			res := outcome(err, client.ErrNotFound)
			r.rec.End(id, Output{Result: res, Holder: lk.Holder, Token: lk.Token})
			if res != Unknown {
				out[key] = Final{Found: res == OK, Holder: lk.Holder, Token: lk.Token}
				break
			}
			if time.Now().After(deadline) {
				r.violate("held", "%s: no definite answer from the healed cluster in 60s: %v", key, err)
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return out
}

// The fault classes.

func faultKill(victim func(r *run) *node) func(r *run) error {
	return func(r *run) error {
		n := victim(r)
		r.mark()
		r.c.kill(n)
		r.sleep(*flagDown/3, *flagDown)
		r.holdFault()
		r.c.start(n)
		return nil
	}
}

func faultKillAll(r *run) error {
	r.mark()
	for _, n := range r.c.nodes {
		r.c.kill(n)
	}
	r.sleep(*flagDown/3, *flagDown)
	for _, n := range r.c.nodes {
		r.c.start(n)
	}
	return nil
}

// faultStop freezes the leader until another node leads, and a little
// longer.
func faultStop(r *run) error {
	l := r.c.leader(60 * time.Second)
	r.mark()
	r.c.signal(l, syscall.SIGSTOP)
	defer r.c.signal(l, syscall.SIGCONT)
	if r.c.waitLeader(l, 60*time.Second) == nil {
		return fmt.Errorf("no other leader within 60s of stopping %s", l.id)
	}
	r.sleep(200*time.Millisecond, 800*time.Millisecond)
	r.holdFault()
	return nil
}

// faultPartition cuts the leader off from the other nodes (clients still
// reach it) until another node leads, and a little longer.
func faultPartition(r *run) error {
	l := r.c.leader(60 * time.Second)
	if err := r.c.isolate(l, true); err != nil {
		return err
	}
	r.mark() // once every route is cut: it takes a few ip(8) calls
	if r.c.waitLeader(l, 60*time.Second) == nil {
		_ = r.c.isolate(l, false)
		return fmt.Errorf("no other leader within 60s of isolating %s", l.id)
	}
	r.sleep(200*time.Millisecond, 800*time.Millisecond)
	r.holdFault()
	return r.c.isolate(l, false)
}

// faultSilence makes the leader's links to the other nodes (and, with
// clients, to the clients too) drop every packet without a word, until
// another node leads and a little longer: a cable pulled mid-stream,
// where partition's blackhole routes refuse connects at once.
func faultSilence(clients bool) func(r *run) error {
	return func(r *run) error {
		l := r.c.leader(60 * time.Second)
		if err := r.c.silence(l, true, clients); err != nil {
			return err
		}
		r.mark()
		if r.c.waitLeader(l, 60*time.Second) == nil {
			_ = r.c.silence(l, false, clients)
			return fmt.Errorf("no other leader within 60s of silencing %s", l.id)
		}
		r.sleep(200*time.Millisecond, 800*time.Millisecond)
		r.holdFault()
		return r.c.silence(l, false, clients)
	}
}

// faultMembership changes the membership under load, one of (seeded):
// remove a follower with `fencelock cluster remove` and join a fresh node
// in its place with `fencelock server --join`; the same with the leader;
// or ask `fencelock cluster join` to add a node that is not running (an
// operator's typo) and then remove it. Whatever the change, the cluster
// must keep a ready leader and end with the membership asked for.
func faultMembership(r *run) error {
	c := r.c
	l := c.leader(60 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	addrs := strings.Join(c.addrs(), ",")
	switch r.rng.IntN(3) {
	case 0, 1: // replace a follower, or the leader
		idx := slices.Index(c.nodes, l)
		if r.rng.IntN(2) == 0 {
			var followers []int
			for i, n := range c.nodes {
				if n != l {
					followers = append(followers, i)
				}
			}
			idx = followers[r.rng.IntN(len(followers))]
		}
		old := c.nodes[idx]
		r.logf("membership: replacing %s (leader %s)", old.id, l.id)
		r.mark()
		if out, err := c.cli(ctx, "cluster", "remove", "--id", old.id, "--addr", addrs, "--timeout", "60s"); err != nil {
			return fmt.Errorf("cluster remove %s: %v: %s", old.id, err, out)
		}
		c.kill(old)
		if c.waitLeader(old, 60*time.Second) == nil {
			r.violate("membership", "no ready leader within 60s of removing %s", old.id)
		}
		r.sleep(100*time.Millisecond, 500*time.Millisecond)
		c.gen++
		fresh := &node{id: fmt.Sprintf("%sr%d", old.id, c.gen), client: freeAddr(r.t), raft: freeAddr(r.t),
			data: filepath.Join(c.dir, fmt.Sprintf("%sr%d", old.id, c.gen))}
		var join []string
		for _, n := range c.nodes {
			if n != old {
				join = append(join, n.client)
			}
		}
		c.nodes[idx] = fresh
		c.start(fresh, "--join", strings.Join(join, ","))
		return r.waitMembers(fresh.id, true)
	default: // joins of nodes that are not running, then their removal
		var ghosts []string
		r.mark()
		for range 1 + r.rng.IntN(len(c.nodes)) {
			ghost := fmt.Sprintf("ghost%d", c.gen)
			c.gen++
			ghosts = append(ghosts, ghost)
			out, err := c.cli(ctx, "cluster", "join", "--id", ghost, "--raft", freeAddr(r.t), "--client", freeAddr(r.t), "--addr", addrs, "--timeout", "20s")
			r.logf("cluster join %s (not running): %v: %s", ghost, err, firstLine(out))
		}
		if c.waitLeader(nil, 60*time.Second) == nil {
			r.violate("membership", "no ready leader within 60s of joins of %v, nodes that are not running", ghosts)
			return nil
		}
		for _, ghost := range ghosts {
			ld := c.findLeader(nil)
			if ld == nil {
				r.violate("membership", "no ready leader while removing %v, nodes that never ran", ghosts)
				return nil
			}
			if m, merr := members(ld.client); merr == nil && slices.ContainsFunc(m.Members, func(mm member) bool { return mm.ID == ghost }) {
				if out, err := c.cli(ctx, "cluster", "remove", "--id", ghost, "--addr", addrs, "--timeout", "30s"); err != nil {
					r.violate("membership", "%s, a node that never ran, was added and cannot be removed: %v: %s", ghost, err, firstLine(out))
					return nil
				}
			}
			if err := r.waitMembers(ghost, false); err != nil {
				return err
			}
		}
		return nil
	}
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

// waitMembers polls the leader's view until id is a voter (or, with want
// false, not a member at all); failing that within 60s is a violation.
func (r *run) waitMembers(id string, want bool) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		if ld := r.c.findLeader(nil); ld != nil {
			if m, err := members(ld.client); err == nil {
				voter := slices.ContainsFunc(m.Members, func(mm member) bool { return mm.ID == id && strings.EqualFold(mm.Suffrage, "voter") })
				present := slices.ContainsFunc(m.Members, func(mm member) bool { return mm.ID == id })
				if (want && voter) || (!want && !present) {
					return nil
				}
			}
		}
		if time.Now().After(deadline) {
			r.violate("membership", "%s: not %s within 60s", id, map[bool]string{true: "a voter", false: "gone"}[want])
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
}
