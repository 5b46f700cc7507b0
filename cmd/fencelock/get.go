package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/fencelock/fencelock/client"
)

func init() {
	register(command{name: "get", summary: "show who holds a lock", run: runGet})
}

const getUsage = `Usage: fencelock get KEY

Shows KEY's live lease: holder, token, TTL and remaining time. Exit status 1
when nobody holds it.
`

func runGet(ctx context.Context, e *env, args []string) error {
	fs, cf := newClientFlagSet("get", e)
	pos, err := parseArgs(fs, e, getUsage+clientFlagsUsage, args)
	if err != nil {
		return helpOK(err)
	}
	if err := wantArgs(fs, pos, 1, 1, "KEY"); err != nil {
		return err
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	defer c.Close()
	cctx, cancel := cf.callContext(ctx, 0)
	defer cancel()
	lk, err := c.Get(cctx, pos[0])
	if err != nil {
		return clientFail("get "+pos[0], err)
	}
	if cf.json {
		return writeJSON(e.stdout, lk)
	}
	return printLocks(e.stdout, []client.Lock{lk})
}

// printLocks writes leases as an aligned table with a header.
func printLocks(w io.Writer, locks []client.Lock) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tHOLDER\tTOKEN\tTTL\tREMAINING")
	for _, l := range locks {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%v\t%v\n", l.Key, l.Holder, l.Token, l.TTL, l.Remaining.Round(time.Millisecond))
	}
	return tw.Flush()
}
