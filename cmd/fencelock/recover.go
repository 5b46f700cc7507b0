package main

import (
	"context"
	"fmt"

	"github.com/fencelock/fencelock/internal/node"
)

const recoverUsage = `Usage: fencelock recover --data DIR [--min-token N]

Repairs the data directory of a stopped single-node server that refused to
start because its log or snapshots are damaged. It keeps the newest
snapshot that reads back whole and the log entries that pass their
checksums up to the first that does not (or drops the log when what is
left cannot follow the snapshot), moves everything it drops into
DIR/damaged-TIME/, and records a token floor at or above every token the
server ever issued. The next start commits that floor before it serves a
grant: the next token is above every token issued before the damage.
Leases granted in the dropped entries are lost. A data directory of the
etcd engine (--engine etcd) loses more: recover does not read that
engine's log, so it moves the log and the snapshots aside and keeps only
the token floor; the node starts empty, every lease lost, no token issued
twice. It prints what it did.

A node of a cluster is better wiped and rejoined from its peers (see
docs/OPERATIONS.md).
`

func runRecover(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "recover", recoverUsage)
	data := f.String("data", defaultData, "data `DIR` to repair")
	f.Env("data", "FENCELOCK_DATA")
	minToken := f.Uint64("min-token", 0, "a `TOKEN` at or above every token ever issued; required when DIR/fencelock.state is unreadable")
	asJSON := f.Bool("json", false, "print what it did as JSON: {\"data\": DIR, \"did\": [...]}")
	pos, err := f.parse(args)
	if err != nil {
		return err
	}
	if err := noArgs(pos); err != nil {
		return err
	}
	if *data == "" {
		return usageError("--data must not be empty")
	}
	did, err := node.Recover(*data, node.RecoverOptions{MinToken: *minToken})
	if err != nil {
		return err
	}
	if *asJSON {
		if did == nil {
			did = []string{}
		}
		return writeJSON(e.stdout, recoverAnswer{Data: *data, Did: did})
	}
	for _, line := range did {
		if _, err := fmt.Fprintf(e.stdout, "recover: %s\n", line); err != nil {
			return err
		}
	}
	return nil
}

// recoverAnswer is recover's --json.
type recoverAnswer struct {
	Data string   `json:"data"`
	Did  []string `json:"did"`
}
