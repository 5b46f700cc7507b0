package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/fencelock/fencelock/bench/internal/peerbench"
)

const failoverUsage = `Usage: fencelock-bench failover --system fencelock|etcd|zookeeper --addr A,B,C [--rounds N]

Measures a three-node cluster's failover: each round kills the leader with
kill -9, then times until a fresh client is granted a lock by the
survivors: a new try (a fresh connection, one lock of a fresh key, bounded
by --attempt) starts every --every until one is granted;
then restarts the dead node on its data. Before each kill a client holds
--hold leases (fencelock, etcd), and after the first grant a fresh client
asks whether each is still live under its token: none may be lost.
Prints each round and the p50/p99/max, and the held leases lost. The clusters come from peers/cluster.sh, which also kills and
revives the nodes (--script):

  bash peers/cluster.sh start
  fencelock-bench failover --system fencelock --addr 127.0.0.1:7481,127.0.0.1:7482,127.0.0.1:7483
  fencelock-bench failover --system etcd --addr 127.0.0.1:23791,127.0.0.1:23792,127.0.0.1:23793

Flags:
`

func runFailover(ctx context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("failover", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	system := fs.String("system", "", "the `system`: fencelock, etcd or zookeeper")
	addr := fs.String("addr", "", "every node's client `addresses`, comma-separated")
	rounds := fs.Int("rounds", 20, "how many leader kills")
	script := fs.String("script", "peers/cluster.sh", "the cluster `script` whose kill-leader and revive commands are run with bash")
	attempt := fs.Duration("attempt", 2*time.Second, "bound of one try at a grant")
	every := fs.Duration("every", 50*time.Millisecond, "how often a new try starts (the resolution)")
	timeout := fs.Duration("timeout", 60*time.Second, "bound of one round")
	hold := fs.Int("hold", 100, "leases held across each kill and checked after it (fencelock and etcd; 0: none)")
	holdTTL := fs.Duration("hold-ttl", 30*time.Second, "TTL of the held leases")
	markdown := fs.Bool("markdown", false, "print a Markdown table")
	if help, err := parseFlags(e, fs, failoverUsage, args); help || err != nil {
		return err
	}
	if !slices.Contains([]string{"fencelock", "etcd", "zookeeper"}, *system) {
		return usageError("failover: --system must be fencelock, etcd or zookeeper, not %q", *system)
	}
	if strings.Count(*addr, ",") < 2 {
		return usageError("failover: --addr must list every node of the cluster (at least three), not %q", *addr)
	}
	if *rounds <= 0 || *attempt <= 0 || *timeout <= 0 || *every <= 0 {
		return usageError("failover: --rounds, --attempt, --every and --timeout must be positive")
	}
	if *hold < 0 || *holdTTL <= 0 {
		return usageError("failover: --hold must not be negative and --hold-ttl must be positive")
	}
	sh := func(cmd string) func(context.Context) error {
		return func(ctx context.Context) error {
			out, err := exec.CommandContext(ctx, "bash", *script, cmd, *system).CombinedOutput()
			if err != nil {
				return fmt.Errorf("bash %s %s %s: %w: %s", *script, cmd, *system, err, strings.TrimSpace(string(out)))
			}
			return nil
		}
	}
	f := peerbench.Failover{
		System: *system, Options: peerbench.Options{Addr: *addr, TTL: 10 * time.Second},
		Kill: sh("kill-leader"), Revive: sh("revive"),
		Rounds: *rounds, Attempt: *attempt, Timeout: *timeout, Every: *every,
		Hold: *hold, HoldTTL: *holdTTL,
		Progress: func(round int, d time.Duration) {
			fmt.Fprintf(e.stderr, "failover: %s round %d: first grant %v after the kill\n", *system, round, d.Round(time.Millisecond))
		},
	}
	r, err := f.Run(ctx)
	if errors.Is(err, peerbench.ErrUnreachable) {
		return &exitError{Code: exitUnreachable, Err: err}
	}
	if err != nil {
		return err
	}
	ms := func(d time.Duration) string { return d.Round(time.Millisecond).String() }
	held := "n/a"
	if r.Held > 0 {
		held = fmt.Sprintf("%d of %d", r.Lost, r.Held)
	}
	if *markdown {
		fmt.Fprintln(e.stdout, "| system | kills | p50 | p99 | max | held leases lost |")
		fmt.Fprintln(e.stdout, "|---|---|---|---|---|---|")
		fmt.Fprintf(e.stdout, "| %s | %d | %s | %s | %s | %s |\n", r.System, r.Summary.N, ms(r.Summary.P50), ms(r.Summary.P99), ms(r.Summary.Max), held)
		return nil
	}
	fmt.Fprintf(e.stdout, "%s: %d kills, time to the first grant p50 %s p99 %s max %s; held leases lost: %s\n",
		r.System, r.Summary.N, ms(r.Summary.P50), ms(r.Summary.P99), ms(r.Summary.Max), held)
	return nil
}
