package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/bench"
)

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
`

func runBench(ctx context.Context, e *env, args []string) error {
	if f := movedBenchFlag(args); f != "" {
		return movedError(fmt.Sprintf("bench --%s moved to the bench module: cd bench && go run ./cmd/fencelock-bench run --%s ... (bench/README.md)", f, f))
	}
	f := newFlags(e, "bench", benchUsage)
	addr := f.String("addr", defaultListen, "server `ADDRS`: host:port, or a comma-separated list of cluster nodes")
	f.Env("addr", "FENCELOCK_ADDR")
	mode := f.String("mode", bench.Uncontended, "load `MODE`: uncontended or contended")
	clients := f.Int("clients", 8, "`N` concurrent clients")
	duration := f.Duration("duration", defaultBenchDuration, "how long to run")
	ttl := f.Duration("ttl", defaultBenchTTL, "lease TTL of each grant")
	useHTTP := f.Bool("http", false, "send the requests over HTTP/1.1 instead of a framed connection")
	asJSON := f.Bool("json", false, "print the result as one JSON object instead of the text lines")
	token := authTokenFlag(f) // on a cluster with ACLs on; it needs lock on bench/
	pos, err := f.parse(args)
	if err != nil {
		return err
	}
	if err := noArgs(pos); err != nil {
		return err
	}
	if *mode != bench.Uncontended && *mode != bench.Contended {
		return usageError("--mode must be uncontended or contended, not %q", *mode)
	}
	if *clients < 1 || *duration <= 0 {
		return usageError("--clients must be >= 1 and --duration > 0")
	}
	if !*asJSON {
		fmt.Fprintf(e.stdout, "bench: addr=%s mode=%s clients=%d duration=%s ttl=%s\n", *addr, *mode, *clients, *duration, *ttl)
	}
	r, err := bench.Run(ctx, bench.Config{Addr: *addr, Mode: *mode, Clients: *clients, Duration: *duration, TTL: *ttl, HTTP: *useHTTP, AuthToken: *token})
	if errors.Is(err, bench.ErrUnreachable) {
		return &exitError{Code: exitUnreachable, Err: err}
	}
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(e.stdout, benchAnswer{Addr: *addr, Mode: *mode, Clients: *clients, DurationMs: api.Ms(*duration),
			TTLMs: api.Ms(*ttl), Cycles: r.Cycles, Errors: r.Errors, ElapsedMs: api.Ms(r.Elapsed), PerSecond: r.PerSecond(),
			P50Ms: ms(r.P50), P99Ms: ms(r.P99), MaxMs: ms(r.Max)})
	}
	fmt.Fprintf(e.stdout, "cycles=%d errors=%d elapsed=%s max=%s\n", r.Cycles, r.Errors, r.Elapsed.Round(1e6), r.Max)
	fmt.Fprintln(e.stdout, r.Summary())
	if r.Cycles == 0 && r.Errors > 0 {
		return fmt.Errorf("bench: all %d calls failed and no cycle completed; a cluster with ACLs on needs --auth-token", r.Errors)
	}
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

// benchAnswer is bench's --json: the run's parameters and its result,
// durations in milliseconds like the API's _ms fields (latencies with a
// fraction).
type benchAnswer struct {
	Addr       string  `json:"addr"`
	Mode       string  `json:"mode"`
	Clients    int     `json:"clients"`
	DurationMs int64   `json:"duration_ms"`
	TTLMs      int64   `json:"ttl_ms"`
	Cycles     int     `json:"cycles"`
	Errors     int     `json:"errors"`
	ElapsedMs  int64   `json:"elapsed_ms"`
	PerSecond  float64 `json:"cycles_per_second"`
	P50Ms      float64 `json:"p50_ms"`
	P99Ms      float64 `json:"p99_ms"`
	MaxMs      float64 `json:"max_ms"`
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
