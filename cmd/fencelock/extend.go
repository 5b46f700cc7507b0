package main

import (
	"context"
	"strconv"

	"github.com/fencelock/fencelock/client"
)

func init() {
	register(command{name: "extend", summary: "extend a held lock, keeping its token", run: runExtend})
}

const extendUsage = `Usage: fencelock extend KEY TOKEN --holder H [--ttl D]

Keeps the lease (KEY, H, TOKEN) alive for another D from now, keeping the
token, and prints the token. Exit status 1 when that is not the key's live
grant any more (it expired, was released, or was renewed under a new token).
`

func runExtend(ctx context.Context, e *env, args []string) error {
	fs, cf := newClientFlagSet("extend", e)
	holder := fs.String("holder", e.getenv("FENCELOCK_HOLDER"), "holder `name` (env FENCELOCK_HOLDER; required)")
	ttl := fs.Duration("ttl", client.DefaultTTL, "new `TTL` from now, 100ms to 24h")
	pos, err := parseArgs(fs, e, extendUsage+clientFlagsUsage, args)
	if err != nil {
		return helpOK(err)
	}
	if err := wantArgs(fs, pos, 2, 2, "KEY TOKEN"); err != nil {
		return err
	}
	token, err := parseToken("extend", pos[1])
	if err != nil {
		return err
	}
	if *holder == "" {
		return usageError("extend: --holder is required (or set FENCELOCK_HOLDER)")
	}
	if err := positiveDuration("extend", "ttl", *ttl, false); err != nil {
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

func parseToken(cmd, s string) (uint64, error) {
	t, err := strconv.ParseUint(s, 10, 64)
	if err != nil || t == 0 {
		return 0, usageError("%s: TOKEN must be a positive integer, not %q", cmd, s)
	}
	return t, nil
}
