package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/fencelock/fencelock/bench/internal/peerbench"
)

const runUsage = `Usage: fencelock-bench run --system fencelock|etcd|redis|zookeeper [--workload w1|w2|w3|w4|w5] [--addr A] [--duration D]

Runs one of compare's workloads on one system and prints its row of the
table, with the system's own recipe: etcd's concurrency.Mutex, Redis SET
NX PX with an INCR fencing counter in Lua, ZooKeeper's
ephemeral-sequential recipe, or fencelock's API (framed, or HTTP with
--http).
--addr defaults to that system's address in peers/setup.sh (fencelock:
127.0.0.1:7470). For load against fencelock alone, 'fencelock bench' is
in the product binary.

Flags:
`

func runSystem(ctx context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	system := fs.String("system", "", "the `system` to run: fencelock, etcd, redis or zookeeper")
	workload := fs.String("workload", string(peerbench.W1), "the `workload`: w1, w2, w3, w4 or w5 (see 'fencelock-bench compare -h')")
	addr := fs.String("addr", "", "the system's `address` (default: its address in peers/setup.sh)")
	duration := fs.Duration("duration", 10*time.Second, "how long to run")
	ttl := fs.Duration("ttl", 10*time.Second, "lease TTL of each grant")
	useHTTP := fs.Bool("http", false, "fencelock: send the requests over HTTP/1.1 instead of a framed connection")
	useJSON := fs.Bool("json", false, "fencelock: send the hot calls as JSON on the framed connection instead of in binary")
	if help, err := parseFlags(e, fs, runUsage, args); help || err != nil {
		return err
	}
	if !slices.Contains(peerbench.Systems, *system) {
		return usageError("run: --system must be one of %s, not %q", strings.Join(peerbench.Systems, ", "), *system)
	}
	w := peerbench.Workload(*workload)
	if !slices.Contains(peerbench.Workloads, w) {
		return usageError("run: --workload must be w1, w2, w3, w4 or w5, not %q", w)
	}
	if *duration <= 0 {
		return usageError("run: --duration must be positive")
	}
	o := peerbench.Options{Addr: *addr, TTL: *ttl, FencelockHTTP: *useHTTP, FencelockJSON: *useJSON}
	r, err := peerbench.RunSystem(ctx, *system, w, o, peerbench.Params{Duration: *duration})
	if errors.Is(err, peerbench.ErrUnreachable) {
		return &exitError{Code: exitUnreachable, Err: err}
	}
	if err != nil {
		return err
	}
	return peerbench.FormatTable(e.stdout, []peerbench.Result{r}, false)
}
