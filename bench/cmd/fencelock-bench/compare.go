package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/fencelock/fencelock/bench/internal/peerbench"
)

const compareUsage = `Usage: fencelock-bench compare [flags]

Runs each listed system through the same workloads, one system after the
other per workload, and prints one table with every rate and p99 as a ratio
to fencelock's (fl/x: above 1 for a rate, below 1 for a p99, is better for
fencelock). Start the peers with 'bash peers/setup.sh' (in bench/) and a
server with 'fencelock server'. A system that does not answer is reported
and left out.

Workloads:
  w1  uncontended: --clients clients over --keys keys, acquire+release cycles
  w2  contended: one key, --w2-clients clients, hand-offs and FIFO order
  w3  keep-alive: --w3-leases leases extended at TTL/3 (--w3-ttl)
  w4  scale: --w4-locks held locks, server RSS per lock, snapshot size
      (slow; not in the default list)
  w5  Chubby scale: --w5-sessions sessions (fencelock sessions, etcd
      leases) each extended at TTL/3 (--w5-ttl); server CPU and RSS
      (slow; not in the default list; ZooKeeper and Redis are skipped)

On a shared machine use --rounds 3 or more: each round runs the systems in
a rotated order and the table shows each system's median round.

Flags:
`

func runCompare(ctx context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	systems := fs.String("systems", strings.Join(peerbench.Systems, ","), "comma-separated `list` of systems")
	workloads := fs.String("workloads", "w1,w2,w3", "comma-separated `list` of workloads (w1,w2,w3,w4,w5)")
	var p peerbench.Params
	fs.DurationVar(&p.Duration, "duration", 10*time.Second, "measured time per workload and system")
	fs.DurationVar(&p.Warmup, "warmup", time.Second, "unmeasured run before each measurement")
	fs.IntVar(&p.W1Clients, "clients", 32, "w1 clients")
	fs.IntVar(&p.W1Keys, "keys", 10000, "w1 keys")
	fs.IntVar(&p.W2Clients, "w2-clients", 8, "w2 clients on the one key")
	fs.DurationVar(&p.W2Hold, "w2-hold", 0, "w2 time a holder keeps the lock before release")
	fs.DurationVar(&p.W2Slack, "w2-slack", 2*time.Millisecond, "w2 start-time difference below which an overtake is not counted")
	fs.IntVar(&p.W3Leases, "w3-leases", 10000, "w3 leases held")
	fs.DurationVar(&p.W3TTL, "w3-ttl", 15*time.Second, "w3 lease TTL; extends are due every TTL/3")
	fs.IntVar(&p.W3Workers, "w3-workers", 32, "w3 clients sending extends")
	fs.IntVar(&p.W4Locks, "w4-locks", 1000000, "w4 locks held")
	fs.BoolVar(&p.W4Keep, "w4-keep", false, "leave the w4 locks held (TTL 1h), to time a restart with them")
	fs.IntVar(&p.W5Sessions, "w5-sessions", 100000, "w5 sessions kept alive")
	fs.DurationVar(&p.W5TTL, "w5-ttl", 30*time.Second, "w5 session TTL; extends are due every TTL/3")
	fs.IntVar(&p.W5Workers, "w5-workers", 32, "w5 clients opening and extending sessions")
	markdown := fs.Bool("markdown", false, "print a Markdown table")
	rounds := fs.Int("rounds", 1, "runs of each workload per system, in rotating order; the table shows the median")
	var o peerbench.Options
	fs.DurationVar(&o.TTL, "ttl", 10*time.Second, "lease TTL of w1/w2 locks (etcd session TTL, ZooKeeper session timeout)")
	fs.DurationVar(&o.RedisRetryMin, "redis-retry-min", time.Millisecond, "shortest poll delay of a waiting Redis client")
	fs.DurationVar(&o.RedisRetryMax, "redis-retry-max", 5*time.Millisecond, "longest poll delay of a waiting Redis client (redsync: 50ms..250ms)")
	fs.StringVar(&o.DataDir, "data-fencelock", "", "the fencelock server's --data `dir`, for w4's snapshot size")
	fs.BoolVar(&o.FencelockHTTP, "fencelock-http", false, "drive fencelock over HTTP/1.1 instead of framed connections")
	fs.BoolVar(&o.FencelockJSON, "fencelock-json", false, "send fencelock's hot calls as JSON on framed connections instead of in binary")
	addrs := map[string]*string{}
	for _, s := range peerbench.Systems {
		addrs[s] = fs.String("addr-"+s, peerbench.DefaultAddrs[s], s+" `address`")
	}
	if help, err := parseFlags(e, fs, compareUsage, args); help || err != nil {
		return err
	}
	if p.Duration <= 0 {
		return usageError("compare: --duration must be positive")
	}
	if *rounds < 1 || *rounds > 20 {
		return usageError("compare: --rounds must be between 1 and 20")
	}
	sys, err := parseList(*systems, peerbench.Systems)
	if err != nil {
		return usageError("compare: --systems: %v", err)
	}
	var known []string
	for _, w := range peerbench.Workloads {
		known = append(known, string(w))
	}
	wls, err := parseList(*workloads, known)
	if err != nil {
		return usageError("compare: --workloads: %v", err)
	}
	o.Clients = max(p.W1Clients, p.W2Clients, p.W3Workers, p.W5Workers)

	opened := []peerbench.System{}
	defer func() {
		for _, s := range opened {
			s.Close()
		}
	}()
	var results []peerbench.Result
	for _, name := range sys {
		so := o
		so.Addr = *addrs[name]
		s, err := peerbench.Open(ctx, name, so)
		if err != nil {
			fmt.Fprintf(e.stderr, "compare: %s left out: %v\n", name, err)
			continue
		}
		opened = append(opened, s)
	}
	if len(opened) == 0 {
		return &exitError{Code: exitUnreachable, Err: errors.New("compare: no system answered")}
	}
	// Workload by workload, so each table block was measured close in time;
	// each round starts with the next system, so none always runs first
	// (or always right after the heaviest one).
	for _, w := range wls {
		byName := map[string][]peerbench.Result{}
		for round := range *rounds {
			for i := range opened {
				s := opened[(i+round)%len(opened)]
				fmt.Fprintf(e.stderr, "compare: %s on %s (round %d of %d)...\n", w, s.Name(), round+1, *rounds)
				r, err := peerbench.Run(ctx, s, peerbench.Workload(w), p)
				if err != nil {
					if ctx.Err() != nil {
						return err
					}
					fmt.Fprintf(e.stderr, "compare: %s on %s failed: %v\n", w, s.Name(), err)
					r = peerbench.Result{System: s.Name(), Workload: peerbench.Workload(w), Skipped: "failed: " + err.Error()}
				}
				byName[s.Name()] = append(byName[s.Name()], r)
			}
		}
		for _, s := range opened {
			results = append(results, peerbench.MedianRound(byName[s.Name()]))
		}
	}
	return peerbench.FormatTable(e.stdout, results, *markdown)
}

// parseList splits a comma-separated list and checks each item is known,
// keeping the order given and dropping repeats.
func parseList(s string, known []string) ([]string, error) {
	var out []string
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(strings.ToLower(item))
		if item == "" {
			continue
		}
		if !slices.Contains(known, item) {
			return nil, fmt.Errorf("unknown %q (known: %s)", item, strings.Join(known, ", "))
		}
		if !slices.Contains(out, item) {
			out = append(out, item)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("empty list")
	}
	return out, nil
}
