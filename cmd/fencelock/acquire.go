package main

import (
	"context"

	"github.com/fencelock/fencelock/client"
)

func init() {
	register(command{name: "acquire", summary: "acquire a lock once and print its fencing token", run: runAcquire})
}

const acquireUsage = `Usage: fencelock acquire KEY --holder H [--ttl D] [--wait D]

Asks the server for KEY on behalf of holder H and prints the fencing token
alone on stdout (with --json, the lease). With --wait, waits in the key's
FIFO queue for up to D (at most 1h) before giving up. Nothing keeps the
lease alive: extend it with 'fencelock extend' before the TTL runs out, or
use 'fencelock lock KEY -- CMD', which does. Acquiring a key that H already
holds renews it under a new token.

Exit status 1 when another holder has the key (or the wait elapsed).
`

func runAcquire(ctx context.Context, e *env, args []string) error {
	fs, cf := newClientFlagSet("acquire", e)
	holder := fs.String("holder", e.getenv("FENCELOCK_HOLDER"), "holder `name` (env FENCELOCK_HOLDER; required)")
	ttl := fs.Duration("ttl", client.DefaultTTL, "lease `TTL`, 100ms to 24h")
	wait := fs.Duration("wait", 0, "wait in the queue up to `D` (0: try once)")
	pos, err := parseArgs(fs, e, acquireUsage+clientFlagsUsage, args)
	if err != nil {
		return helpOK(err)
	}
	if err := wantArgs(fs, pos, 1, 1, "KEY"); err != nil {
		return err
	}
	if *holder == "" {
		return usageError("acquire: --holder is required (or set FENCELOCK_HOLDER)")
	}
	if err := positiveDuration("acquire", "ttl", *ttl, false); err != nil {
		return err
	}
	if err := positiveDuration("acquire", "wait", *wait, true); err != nil {
		return err
	}
	var lk client.Lock
	err = cf.call(ctx, *wait, "acquire "+pos[0], func(ctx context.Context, c *client.Client) (err error) {
		lk, err = c.Grant(ctx, pos[0], *holder, *ttl, *wait)
		return err
	})
	if err != nil {
		return err
	}
	return printGrant(e, cf, lk)
}

// helpOK turns errHelp into success: -h is not a mistake.
func helpOK(err error) error {
	if err == errHelp {
		return nil
	}
	return err
}
