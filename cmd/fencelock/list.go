package main

import (
	"context"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/client"
)

const listUsage = `Usage: fencelock list [PREFIX] [--limit N] [--after KEY]

Lists the live leases whose keys start with PREFIX (all when omitted),
sorted by key. A page holds at most --limit leases; the next page starts
after the last key printed: --after KEY.
`

func runList(ctx context.Context, e *env, args []string) error {
	f, cf := newClientFlags(e, "list", listUsage)
	limit := f.Int("limit", 0, "at most `N` leases (0: the server's default)")
	after := f.String("after", "", "start after `KEY` (the last key of the previous page)")
	cf.common(f, "")
	pos, err := f.parse(args)
	if err != nil {
		return err
	}
	if err := wantArgs(pos, 0, 1, "at most a PREFIX"); err != nil {
		return err
	}
	if *limit < 0 {
		return usageError("--limit must not be negative")
	}
	prefix := ""
	if len(pos) == 1 {
		prefix = pos[0]
	}
	var locks []client.Lock
	err = cf.call(ctx, 0, "list", func(ctx context.Context, c *client.Client) (err error) {
		locks, err = c.ListAfter(ctx, prefix, *after, *limit)
		return err
	})
	if err != nil {
		return err
	}
	if *cf.json {
		out := api.ListResponse{Locks: make([]api.Lease, len(locks))}
		for i, lk := range locks {
			out.Locks[i] = apiLease(lk)
		}
		return writeJSON(e.stdout, out)
	}
	return printLocks(e.stdout, locks)
}
