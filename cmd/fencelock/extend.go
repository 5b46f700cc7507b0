package main

import (
	"context"
	"strconv"

	"github.com/fencelock/fencelock/client"
)

const extendUsage = `Usage: fencelock extend KEY TOKEN --holder H [--ttl D]

Keeps the lease (KEY, H, TOKEN) alive for another D from now, keeping the
token, and prints the token (with --json, the lease). Exit status 1 when
that is not the key's live grant any more (it expired, was released, or
was renewed under a new token).
`

func runExtend(ctx context.Context, e *env, args []string) error {
	f, cf := newClientFlags(e, "extend", extendUsage)
	holder := holderFlag(f, "holder `NAME`; required")
	ttl := f.Duration("ttl", client.DefaultTTL, "new TTL from now, 100ms to 24h")
	cf.common(f, "")
	pos, err := f.parse(args)
	if err != nil {
		return err
	}
	if err := wantArgs(pos, 2, 2, "KEY TOKEN"); err != nil {
		return err
	}
	token, err := parseToken(pos[1])
	if err != nil {
		return err
	}
	if *holder == "" {
		return usageError("--holder is required (or set FENCELOCK_HOLDER)")
	}
	if err := checkDuration("ttl_ms", *ttl); err != nil {
		return err
	}
	var lk client.Lock
	err = cf.call(ctx, 0, "extend "+pos[0], func(ctx context.Context, c *client.Client) (err error) {
		lk, err = c.Extend(ctx, pos[0], *holder, token, *ttl)
		return err
	})
	if err != nil {
		return err
	}
	return printGrant(e, cf, lk)
}

func parseToken(s string) (uint64, error) {
	t, err := strconv.ParseUint(s, 10, 64)
	if err != nil || t == 0 {
		return 0, usageError("TOKEN must be a positive integer, not %q", s)
	}
	return t, nil
}
