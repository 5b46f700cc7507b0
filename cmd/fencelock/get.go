package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fencelock/fencelock/client"
)

const getUsage = `Usage: fencelock get KEY

Shows KEY's live lease: holder, token, TTL and remaining time, every holder
of a semaphore or read/write lock, the session a lease is held under, and
how many wait for the key and who is first (with --json, the lease).
Exit status 1 when nobody holds it.
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
		hs := append([]client.Lock(nil), lk.Holders...)
		hs[0].Waiting, hs[0].NextWaiter = lk.Waiting, lk.NextWaiter
		return printLocks(e.stdout, hs)
	}
	return printLocks(e.stdout, []client.Lock{lk})
}

// printLocks writes leases, in key order, as an aligned table with a
// header. KIND, SESSION, WAITING and NEXT are there only when something is
// in them, so a table of plain leases reads as it always has. A key's
// queue is on each of its rows (the server gives it with the key's first
// lease); NEXT is the head waiter, with a read/write waiter's mode.
func printLocks(w io.Writer, locks []client.Lock) error {
	shared, sessions, queues := false, false, false
	for _, l := range locks {
		shared = shared || l.Kind != ""
		sessions = sessions || l.Session != 0
		queues = queues || l.Waiting > 0
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(cells ...string) { fmt.Fprintln(tw, strings.Join(cells, "\t")) }
	head := []string{"KEY"}
	if shared {
		head = append(head, "KIND")
	}
	head = append(head, "HOLDER", "TOKEN", "TTL", "REMAINING")
	if sessions {
		head = append(head, "SESSION")
	}
	if queues {
		head = append(head, "WAITING", "NEXT")
	}
	row(head...)
	var first client.Lock // the first lease of the current key
	for _, l := range locks {
		if l.Key != first.Key || first.Key == "" {
			first = l
		}
		cells := []string{l.Key}
		if shared {
			cells = append(cells, kindColumn(l))
		}
		cells = append(cells, l.Holder, strconv.FormatUint(l.Token, 10), l.TTL.String(), l.Remaining.Round(time.Millisecond).String())
		if sessions {
			cells = append(cells, dashIfZero(l.Session))
		}
		if queues {
			cells = append(cells, strconv.Itoa(first.Waiting), nextColumn(first.NextWaiter))
		}
		row(cells...)
	}
	return tw.Flush()
}

func dashIfZero(n uint64) string {
	if n == 0 {
		return "-"
	}
	return strconv.FormatUint(n, 10)
}

// nextColumn is the head waiter: its holder, and a read/write waiter's
// mode after a slash.
func nextColumn(w *client.Waiter) string {
	switch {
	case w == nil:
		return "-"
	case w.Mode != "":
		return w.Holder + "/" + w.Mode
	}
	return w.Holder
}
