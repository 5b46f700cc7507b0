package main

import (
	"context"

	"github.com/fencelock/fencelock/client"
)

func init() {
	register(command{name: "list", summary: "list live locks by key prefix", run: runList})
}

const listUsage = `Usage: fencelock list [PREFIX] [--limit N]

Lists the live leases whose keys start with PREFIX (all when omitted),
sorted by key.
`

func runList(ctx context.Context, e *env, args []string) error {
	fs, cf := newClientFlagSet("list", e)
	limit := fs.Int("limit", 0, "at most `N` leases (0: the server's default)")
	pos, err := parseArgs(fs, e, listUsage+clientFlagsUsage, args)
	if err != nil {
		return helpOK(err)
	}
	if err := wantArgs(fs, pos, 0, 1, "at most a PREFIX"); err != nil {
		return err
	}
	if *limit < 0 {
		return usageError("list: --limit must not be negative")
	}
	prefix := ""
	if len(pos) == 1 {
		prefix = pos[0]
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	defer c.Close()
	cctx, cancel := cf.callContext(ctx, 0)
	defer cancel()
	locks, err := c.List(cctx, prefix, *limit)
	if err != nil {
		return clientFail("list", err)
	}
	if cf.json {
		return writeJSON(e.stdout, map[string][]client.Lock{"locks": locks})
	}
	return printLocks(e.stdout, locks)
}
