package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/fencelock/fencelock/internal/bench"
)

func init() {
	register(command{name: "bench", summary: "measure acquire+release cycles/s, p50, p99 against a server", run: runBench})
}

const (
	defaultBenchDuration = 10 * time.Second
	defaultBenchTTL      = 10 * time.Second
)

const benchUsage = `Usage: fencelock bench [--addr A[,B,...]] [--mode uncontended|contended] [--clients N] [--duration D]

Runs N clients doing acquire+release cycles against a running server for
D. uncontended gives each client keys of its own; contended puts every
client on one key with a wait, so each cycle is a FIFO hand-off. The
requests share one framed connection (as the Go client's do); --http sends
them over HTTP/1.1 instead. The last line is: cycles/s=N p50=D p99=D

Against a cluster, give the nodes' addresses: the bench sends its load to
the one that serves writes, and follows a not_leader answer to the leader.

Side-by-side runs against etcd, Redis and ZooKeeper ('compare' and the
former 'bench --system') are in the bench module of the source tree:
cd bench && go run ./cmd/fencelock-bench -h (bench/README.md).

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
	if f := movedBenchFlag(args); f != "" {
		return usageError("bench --%s moved to the bench module: cd bench && go run ./cmd/fencelock-bench run --%s ... (bench/README.md)", f, f)
	}
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

// movedBenchFlag names the first of bench's former side-by-side flags
// (--system, --workload) among args, or "" when none is there.
func movedBenchFlag(args []string) string {
	for _, a := range args {
		if a == "--" {
			break
		}
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if strings.HasPrefix(a, "-") && (name == "system" || name == "workload") {
			return name
		}
	}
	return ""
}
