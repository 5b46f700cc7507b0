package main

import (
	"context"
	"time"

	"github.com/fencelock/fencelock/api"

	"github.com/fencelock/fencelock/client"
)

const acquireUsage = `Usage: fencelock acquire KEY [KEY...] --holder H [--ttl D | --session ID] [--try | --wait D] [--lock-delay D] [--n N | --read | --write]

Asks the server for KEY on behalf of holder H and prints the fencing token
alone on stdout (with --json, the lease). It waits in the key's FIFO queue
until the lock is granted, keeping its place however long that takes (as
flock does); --wait D gives up after D, --try (or --wait 0) tries once.
Ctrl-C (SIGINT) or SIGTERM while waiting leaves the queue, holds nothing,
and exits 130 or 143. Nothing keeps the lease alive: extend it with
'fencelock extend' before the TTL runs out, or use 'fencelock lock KEY --
CMD', which does. Acquiring a key that H already holds renews it under a
new token.

Several KEYs are acquired all or none in one command (at most 64): it
prints "KEY TOKEN" a line. Unless --try, it is tried again, with backoff,
until all are free (or D has passed); it never holds some while waiting,
and does not queue. --session takes the lock(s) under a session
('fencelock session'), which keeps them alive instead of --ttl.
--lock-delay keeps KEY from everyone for D after the lease EXPIRES (not
after a release): a mitigation for resources that cannot check tokens.
` + sharedUsage + `
Exit status 1 when another holder has the key (the wait elapsed, or at
once with --try); 130 or 143 when interrupted while waiting.
`

func runAcquire(ctx context.Context, e *env, args []string) error {
	f, cf := newClientFlags(e, "acquire", acquireUsage)
	holder := holderFlag(f, "holder `NAME`; required")
	ttl := f.Duration("ttl", client.DefaultTTL, "lease TTL, 100ms to 24h")
	waits := addWaitFlags(f)
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
	wait, err := waits.value()
	if err != nil {
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
		if wait == waitForever {
			// All or none retries rather than queues: for as long as it
			// takes is a bound no caller will reach.
			wait = 100 * 365 * 24 * time.Hour
		}
		return acquireMany(ctx, e, cf, pos, *holder, *ttl, wait, g)
	}
	var lk client.Lock
	err = cf.call(ctx, wait, "acquire "+pos[0], func(cctx context.Context, c *client.Client) (err error) {
		lk, err = c.GrantWith(cctx, pos[0], *holder, *ttl, wait, g)
		if in, ok := context.Cause(ctx).(*interrupted); ok && err == nil {
			// Granted as the signal came: give it back, as a wait that
			// was left would have been.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), *cf.timeout)
			defer cancel()
			_, _ = c.Release(rctx, lk.Key, lk.Holder, lk.Token)
			return in
		}
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
