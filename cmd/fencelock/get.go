package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/fencelock/fencelock/client"
)

const getUsage = `Usage: fencelock get KEY

Shows KEY's live lease: holder, token, TTL and remaining time (with --json,
the lease). Exit status 1 when nobody holds it.
`

func runGet(ctx context.Context, e *env, args []string) error {
	f, cf := newClientFlags(e, "get", getUsage)
	cf.common(f, "")
	pos, err := f.parse(args)
	if err != nil {
		return err
	}
	if err := wantArgs(pos, 1, 1, "KEY"); err != nil {
		return err
	}
	var lk client.Lock
	err = cf.call(ctx, 0, "get "+pos[0], func(ctx context.Context, c *client.Client) (err error) {
		lk, err = c.Get(ctx, pos[0])
		return err
	})
	if err != nil {
		return err
	}
	if *cf.json {
		return writeJSON(e.stdout, apiLease(lk))
	}
	if len(lk.Holders) > 0 { // a semaphore or read/write lock: every holder
		return printLocks(e.stdout, lk.Holders)
	}
	return printLocks(e.stdout, []client.Lock{lk})
}

// printLocks writes leases as an aligned table with a header.
func printLocks(w io.Writer, locks []client.Lock) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if anyShared(locks) { // a KIND column only when it says something
		fmt.Fprintln(tw, "KEY\tKIND\tHOLDER\tTOKEN\tTTL\tREMAINING")
		for _, l := range locks {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%v\t%v\n", l.Key, kindColumn(l), l.Holder, l.Token, l.TTL, l.Remaining.Round(time.Millisecond))
		}
		return tw.Flush()
	}
	fmt.Fprintln(tw, "KEY\tHOLDER\tTOKEN\tTTL\tREMAINING")
	for _, l := range locks {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%v\t%v\n", l.Key, l.Holder, l.Token, l.TTL, l.Remaining.Round(time.Millisecond))
	}
	return tw.Flush()
}
