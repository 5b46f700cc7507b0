package main

import (
	"context"

	"github.com/fencelock/fencelock/api"

	"github.com/fencelock/fencelock/client"
)

const acquireUsage = `Usage: fencelock acquire KEY [KEY...] --holder H [--ttl D | --session ID] [--wait D] [--lock-delay D] [--n N | --read | --write]

Asks the server for KEY on behalf of holder H and prints the fencing token
alone on stdout (with --json, the lease). With --wait, waits in the key's
FIFO queue for up to D (at most 1h) before giving up. Nothing keeps the
lease alive: extend it with 'fencelock extend' before the TTL runs out, or
use 'fencelock lock KEY -- CMD', which does. Acquiring a key that H already
holds renews it under a new token.

Several KEYs are acquired all or none in one command (at most 64): it
prints "KEY TOKEN" a line. With --wait it is tried again, with backoff,
until all are free or D has passed; it never holds some while waiting. --session takes the lock(s) under a
session ('fencelock session'), which keeps them alive instead of --ttl.
--lock-delay keeps KEY from everyone for D after the lease EXPIRES (not
after a release): a mitigation for resources that cannot check tokens.
` + sharedUsage + `
Exit status 1 when another holder has the key (or the wait elapsed).
`

func runAcquire(ctx context.Context, e *env, args []string) error {
	f, cf := newClientFlags(e, "acquire", acquireUsage)
	holder := holderFlag(f, "holder `NAME`; required")
	ttl := f.Duration("ttl", client.DefaultTTL, "lease TTL, 100ms to 24h")
	wait := f.Duration("wait", 0, "wait in the key's queue up to D, at most 1h (0: try once)")
	session, lockDelay := sessionFlags(f)
	shared := addSharedFlags(f)
	cf.common(f, "")
	pos, err := f.parse(args)
	if err != nil {
		return err
	}
	if err := wantArgs(pos, 1, api.MaxAcquireKeys, "KEY [KEY...]"); err != nil {
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
	g, err := grantOptions(f, *session, *lockDelay)
	if err != nil {
		return err
	}
	if err := shared.grantOptions(&g, len(pos)); err != nil {
		return err
	}
	if len(pos) > 1 {
		return acquireMany(ctx, e, cf, pos, *holder, *ttl, *wait, g)
	}
	var lk client.Lock
	err = cf.call(ctx, *wait, "acquire "+pos[0], func(ctx context.Context, c *client.Client) (err error) {
		lk, err = c.GrantWith(ctx, pos[0], *holder, *ttl, *wait, g)
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
