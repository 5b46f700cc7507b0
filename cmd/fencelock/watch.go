package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/client"
)

const watchUsage = `Usage: fencelock watch KEY [--after REV] [--count N] [--json]
       fencelock watch --prefix PREFIX [--after REV] [--count N] [--json]

Prints the changes on KEY, or on every key under PREFIX, as they are
applied: granted, released, expired, wait-joined and wait-left (cancelled
or deadline), one a line, each with its revision. Without --after it
starts now; with --after REV it starts after that revision (the last one
printed, or 0 for all the history the server keeps), so a watch that was
stopped goes on without missing anything. It reconnects by itself, to any
node, and runs until interrupted or N changes were printed.

A revision older than the server's history ends it (exit 1) with the
oldest revision it still has: list the keys, then watch again --after it.
--json prints each change as the API's WatchEvent.
`

// watchExit is watch's exit status text: it answers no question of a
// lock, so it has no "held".
const watchExit = `Exit status: 0 stopped after --count changes, or interrupted; 1 the
revision given to --after is older than the server's history; 2 bad usage
or input; 3 the server cannot be reached or cannot serve; 7 refused by the
ACLs.
`

func runWatch(ctx context.Context, e *env, args []string) error {
	f, cf := newClientFlags(e, "watch", watchUsage)
	f.after = watchExit
	prefix := f.Bool("prefix", false, "the argument is a key prefix (\"\" for every key)")
	after := f.String("after", "", "start after revision `REV` (0: the whole history kept)")
	count := f.Int("count", 0, "stop after `N` changes (0: run until interrupted)")
	cf.common(f, "print each change as JSON (api.WatchEvent), one a line")
	pos, err := f.parse(args)
	if err != nil {
		return err
	}
	what := "KEY"
	if *prefix {
		what = "PREFIX"
	}
	if err := wantArgs(pos, 1, 1, what); err != nil {
		return err
	}
	if *count < 0 {
		return usageError("--count must not be negative")
	}
	var opts []client.WatchOption
	if !*prefix {
		opts = append(opts, client.WatchKey())
	}
	if *after != "" {
		rev, err := api.ParseRevision(*after)
		if err != nil {
			return usageError("--after: %v", err)
		}
		opts = append(opts, client.WatchAfter(rev))
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	defer c.Close()
	w := c.Watch(ctx, pos[0], opts...)
	defer w.Close()
	n := 0
	for ev := range w.Events() {
		if err := printEvent(e, *cf.json, ev); err != nil {
			return err
		}
		if n++; n == *count {
			return nil
		}
	}
	if err := w.Err(); err != nil {
		var ce *client.CompactedError
		if errors.As(err, &ce) {
			return answerNo("watch %s: revision %s is older than the server's history, which starts after %s: list the keys, then watch --after %s", pos[0], ce.After, ce.Oldest, ce.Oldest)
		}
		return clientFail("watch "+pos[0], err)
	}
	return nil // interrupted
}

func printEvent(e *env, asJSON bool, ev client.Event) error {
	if asJSON {
		return writeJSON(e.stdout, api.WatchEvent{Revision: ev.Revision, Type: ev.Type, Key: ev.Key, Holder: ev.Holder,
			Token: ev.Token, TTLMs: api.Ms(ev.TTL), Reason: ev.Reason, AtMs: api.Ms(ev.At), SinceMs: api.Ms(ev.Since)})
	}
	line := fmt.Sprintf("%s %s %s %s", ev.Revision, ev.Type, ev.Key, ev.Holder)
	switch {
	case ev.Token != 0 && ev.TTL > 0:
		line += fmt.Sprintf(" token=%d ttl=%v", ev.Token, ev.TTL)
	case ev.Token != 0:
		line += fmt.Sprintf(" token=%d held=%v", ev.Token, (ev.At - ev.Since).Round(time.Millisecond))
	case ev.Reason != "":
		line += " " + ev.Reason
	}
	_, err := fmt.Fprintln(e.stdout, line)
	return err
}
