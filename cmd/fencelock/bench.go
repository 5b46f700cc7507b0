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

	"github.com/fencelock/fencelock/internal/bench"
	"github.com/fencelock/fencelock/internal/peerbench"
)

const (
	defaultBenchDuration = 10 * time.Second
	defaultBenchTTL      = 10 * time.Second
)

const benchUsage = `Usage: fencelock bench [--addr A[,B,...]] [--mode uncontended|contended] [--clients N] [--duration D]
       fencelock bench --system fencelock|etcd|redis|zookeeper [--workload w1|w2|w3|w4] [--addr A] [--duration D]

Runs N clients doing acquire+release cycles against a running server for
D. uncontended gives each client keys of its own; contended puts every
client on one key with a wait, so each cycle is a FIFO hand-off. The
requests share one framed connection (as the Go client's do); --http sends
them over HTTP/1.1 instead. The last line is: cycles/s=N p50=D p99=D

Against a cluster, give the nodes' addresses: the bench sends its load to
the one that serves writes, and follows a not_leader answer to the leader.

With --system, runs one of the side-by-side workloads of 'fencelock
compare' on that system instead (peers: bash bench/peers/setup.sh), with
its recipe: etcd's concurrency.Mutex, Redis SET NX PX with an INCR fencing
counter in Lua, ZooKeeper's ephemeral-sequential recipe, or fencelock's
API (framed, or HTTP with --http). --addr then defaults to that system's address in setup.sh.

Flags:
`

func runBench(ctx context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	addr := fs.String("addr", envOr(e, "FENCELOCK_ADDR", defaultListen), "server `address`, or cluster addresses comma-separated (env FENCELOCK_ADDR)")
	mode := fs.String("mode", bench.Uncontended, "load `mode`: uncontended or contended")
	clients := fs.Int("clients", 8, "concurrent `clients`")
	duration := fs.Duration("duration", defaultBenchDuration, "how long to run")
	ttl := fs.Duration("ttl", defaultBenchTTL, "lease TTL of each grant")
	useHTTP := fs.Bool("http", false, "send the requests over HTTP/1.1 instead of a framed connection")
	system := fs.String("system", "", "run a side-by-side `workload` on this system: fencelock, etcd, redis or zookeeper")
	workload := fs.String("workload", string(peerbench.W1), "with --system: w1, w2, w3 or w4 (see 'fencelock compare -h')")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			fmt.Fprint(e.stdout, benchUsage)
			fs.SetOutput(e.stdout)
			fs.PrintDefaults()
			return nil
		}
		return usageError("bench: %v (run 'fencelock bench -h')", err)
	}
	if fs.NArg() > 0 {
		return usageError("bench: unexpected argument %q", fs.Arg(0))
	}
	if *system != "" {
		addrSet := false
		fs.Visit(func(f *flag.Flag) { addrSet = addrSet || f.Name == "addr" })
		o := peerbench.Options{TTL: *ttl, FencelockHTTP: *useHTTP}
		if addrSet {
			o.Addr = *addr
		}
		return benchSystem(ctx, e, *system, peerbench.Workload(*workload), o, *duration)
	}
	if *mode != bench.Uncontended && *mode != bench.Contended {
		return usageError("bench: --mode must be uncontended or contended, not %q", *mode)
	}
	if *clients < 1 || *duration <= 0 {
		return usageError("bench: --clients must be >= 1 and --duration > 0")
	}
	fmt.Fprintf(e.stdout, "bench: addr=%s mode=%s clients=%d duration=%s ttl=%s\n", *addr, *mode, *clients, *duration, *ttl)
	r, err := bench.Run(ctx, bench.Config{Addr: *addr, Mode: *mode, Clients: *clients, Duration: *duration, TTL: *ttl, HTTP: *useHTTP})
	if errors.Is(err, bench.ErrUnreachable) {
		return &exitError{Code: exitUnreachable, Err: err}
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "cycles=%d errors=%d elapsed=%s max=%s\n", r.Cycles, r.Errors, r.Elapsed.Round(1e6), r.Max)
	fmt.Fprintln(e.stdout, r.Summary())
	return nil
}

// benchSystem runs one peerbench workload on one system and prints its row
// of the comparison table.
func benchSystem(ctx context.Context, e *env, system string, w peerbench.Workload, o peerbench.Options, d time.Duration) error {
	if !slices.Contains(peerbench.Systems, system) {
		return usageError("bench: --system must be one of %s, not %q", strings.Join(peerbench.Systems, ", "), system)
	}
	switch w {
	case peerbench.W1, peerbench.W2, peerbench.W3, peerbench.W4:
	default:
		return usageError("bench: --workload must be w1, w2, w3 or w4, not %q", w)
	}
	r, err := peerbench.RunSystem(ctx, system, w, o, peerbench.Params{Duration: d})
	if errors.Is(err, peerbench.ErrUnreachable) {
		return &exitError{Code: exitUnreachable, Err: err}
	}
	if err != nil {
		return err
	}
	return peerbench.FormatTable(e.stdout, []peerbench.Result{r}, false)
}
