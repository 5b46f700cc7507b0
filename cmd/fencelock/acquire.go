package main

import (
	"context"

	"github.com/fencelock/fencelock/client"
)

const acquireUsage = `Usage: fencelock acquire KEY --holder H [--ttl D] [--wait D] [--n N | --read | --write]

Asks the server for KEY on behalf of holder H and prints the fencing token
alone on stdout (with --json, the lease). With --wait, waits in the key's
FIFO queue for up to D (at most 1h) before giving up. Nothing keeps the
lease alive: extend it with 'fencelock extend' before the TTL runs out, or
use 'fencelock lock KEY -- CMD', which does. Acquiring a key that H already
holds renews it under a new token.
` + sharedUsage + `
Exit status 1 when another holder has the key (or the wait elapsed).
`

func runAcquire(ctx context.Context, e *env, args []string) error {
	f, cf := newClientFlags(e, "acquire", acquireUsage)
	holder := holderFlag(f, "holder `NAME`; required")
	ttl := f.Duration("ttl", client.DefaultTTL, "lease TTL, 100ms to 24h")
	wait := f.Duration("wait", 0, "wait in the key's queue up to D, at most 1h (0: try once)")
	shared := addSharedFlags(f) // shared.go
	cf.common(f, "")
	pos, err := f.parse(args)
	if err != nil {
		return err
	}
	if err := wantArgs(pos, 1, 1, "KEY"); err != nil {
		return err
	}
	if *holder == "" {
		return usageError("--holder is required (or set FENCELOCK_HOLDER)")
	}
	if err := checkDuration("ttl_ms", *ttl); err != nil {
		return err
	}
	if err := checkDuration("wait_ms", *wait); err != nil {
		return err
	}
	opts, err := shared.options()
	if err != nil {
		return err
	}
	var lk client.Lock
	err = cf.call(ctx, *wait, "acquire "+pos[0], func(ctx context.Context, c *client.Client) (err error) {
		lk, err = c.Grant(ctx, pos[0], *holder, *ttl, *wait, opts...)
		return err
	})
	if err != nil {
		return err
	}
	return printGrant(e, cf, lk)
}

// holderFlag is the --holder flag, defaulting to FENCELOCK_HOLDER.
func holderFlag(f *flags, usage string) *string {
	h := f.String("holder", "", usage)
	f.Env("holder", "FENCELOCK_HOLDER")
	return h
}
