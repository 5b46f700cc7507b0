package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/fencelock/fencelock/internal/server"
)

func init() {
	register(command{name: "recover", summary: "repair a damaged data dir without ever reissuing a token", run: runRecover})
}

const recoverUsage = `Usage: fencelock recover --data DIR [--min-token N]

Repairs the data directory of a stopped single-node server that refused to
start because its log or snapshots are damaged. It keeps the newest
snapshot that reads back whole and the log entries that pass their
checksums up to the first that does not (or drops the log when what is
left cannot follow the snapshot), moves everything it drops into
DIR/damaged-TIME/, and records a token floor at or above every token the
server ever issued. The next start commits that floor before it serves a
grant: the next token is above every token issued before the damage.
Leases granted in the dropped entries are lost. It prints what it did.

A node of a cluster is better wiped and rejoined from its peers (see
docs/OPERATIONS.md).

Flags:
`

func runRecover(ctx context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("recover", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	data := fs.String("data", envOr(e, "FENCELOCK_DATA", defaultData), "data `directory` to repair (env FENCELOCK_DATA)")
	minToken := fs.Uint64("min-token", 0, "a `token` at or above every token ever issued; required when DIR/fencelock.state is unreadable")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			fmt.Fprint(e.stdout, recoverUsage)
			fs.SetOutput(e.stdout)
			fs.PrintDefaults()
			return nil
		}
		return usageError("recover: %v (run 'fencelock recover -h')", err)
	}
	if fs.NArg() > 0 {
		return usageError("recover: unexpected argument %q (run 'fencelock recover -h')", fs.Arg(0))
	}
	if *data == "" {
		return usageError("recover: --data must not be empty")
	}
	did, err := server.Recover(*data, server.RecoverOptions{MinToken: *minToken})
	if err != nil {
		return err
	}
	for _, line := range did {
		if _, err := fmt.Fprintf(e.stdout, "recover: %s\n", line); err != nil {
			return err
		}
	}
	return nil
}
