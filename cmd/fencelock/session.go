package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/client"
)

const sessionUsage = `Usage: fencelock session open --holder H [--ttl D]
       fencelock session extend ID --holder H
       fencelock session close ID --holder H

A session is a lease of its own (docs/PRIMITIVES.md, "Sessions"). 'open'
prints the new session's id; locks taken with 'fencelock acquire KEY...
--session ID --holder H' live exactly as long as it does. 'extend' renews
the session and so every lock under it, for its TTL; 'close' releases all
of them at once (each key goes to its next waiter). Nothing keeps the
session alive between calls: extend it before its TTL runs out (the Go
client's NewSession does that for you). Only the holder that opened a
session may extend it, close it or lock under it.

Exit status 1 when the session has ended (expired or closed) or is
another holder's.
`

func runSession(ctx context.Context, e *env, args []string) error {
	f, cf := newClientFlags(e, "session", sessionUsage)
	holder := holderFlag(f, "holder `NAME` of the session; required")
	ttl := f.Duration("ttl", client.DefaultTTL, "session TTL (open), 100ms to 24h")
	cf.common(f, "")
	pos, err := f.parse(args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return usageError("want open, extend ID or close ID")
	}
	if *holder == "" {
		return usageError("--holder is required (or set FENCELOCK_HOLDER)")
	}
	var id uint64
	switch pos[0] {
	case "open":
		if err := wantArgs(pos, 1, 1, "open"); err != nil {
			return err
		}
		if err := checkDuration("ttl_ms", *ttl); err != nil {
			return err
		}
	case "extend", "close":
		if err := wantArgs(pos, 2, 2, pos[0]+" ID"); err != nil {
			return err
		}
		if f.given("ttl") {
			return usageError("--ttl is the session's, fixed at open; %s takes none", pos[0])
		}
		if id, err = strconv.ParseUint(pos[1], 10, 64); err != nil || id == 0 {
			return usageError("ID must be a session id from 'fencelock session open', not %q", pos[1])
		}
	default:
		return usageError("unknown session command %q: want open, extend ID or close ID", pos[0])
	}
	var info client.SessionInfo
	err = cf.call(ctx, 0, "session "+pos[0], func(ctx context.Context, c *client.Client) (err error) {
		switch pos[0] {
		case "open":
			info, err = c.OpenSession(ctx, *holder, *ttl)
		case "extend":
			info, err = c.ExtendSession(ctx, id, *holder)
		default:
			info, err = c.CloseSession(ctx, id, *holder)
		}
		return err
	})
	if err != nil {
		return err
	}
	if *cf.json {
		return writeJSON(e.stdout, api.Session{ID: info.ID, Holder: info.Holder, TTLMs: api.Ms(info.TTL),
			RemainingMs: api.Ms(info.Remaining), Locks: info.Locks, Waiting: info.Waiting})
	}
	switch pos[0] {
	case "open":
		_, err = fmt.Fprintln(e.stdout, info.ID)
	case "extend":
		_, err = fmt.Fprintf(e.stdout, "session %d: %d locks, %s left\n", info.ID, info.Locks, fmtDuration(info.Remaining))
	default:
		_, err = fmt.Fprintf(e.stdout, "session %d closed: %d locks released\n", info.ID, info.Locks)
	}
	return err
}

// acquireMany is 'fencelock acquire KEY1 KEY2 ...': every key or none, in
// one command. It prints "KEY TOKEN" a line, in the order given.
func acquireMany(ctx context.Context, e *env, cf *clientFlags, keys []string, holder string, ttl, wait time.Duration, g client.GrantOptions) error {
	g.RetryFor = wait // all or none never queues: --wait retries
	var lks []client.Lock
	err := cf.call(ctx, wait, "acquire "+strings.Join(keys, " "), func(ctx context.Context, c *client.Client) (err error) {
		lks, err = c.AcquireAll(ctx, keys, holder, ttl, g)
		return err
	})
	if err != nil {
		return err
	}
	if *cf.json {
		out := api.AcquireAllResponse{Locks: make([]api.Lease, len(lks))}
		for i, lk := range lks {
			out.Locks[i] = apiLease(lk)
			out.Locks[i].Session = g.Session
		}
		return writeJSON(e.stdout, out)
	}
	for _, lk := range lks {
		if _, err := fmt.Fprintln(e.stdout, lk.Key, lk.Token); err != nil {
			return err
		}
	}
	return nil
}

// sessionFlags are acquire's --session and --lock-delay.
func sessionFlags(f *flags) (*uint64, *time.Duration) {
	session := f.Uint64("session", 0, "take the lock(s) under session `ID` ('fencelock session open'), which keeps them alive instead of --ttl")
	delay := f.Duration("lock-delay", 0, "grant KEY to nobody for D after the lease expires (not after a release), at most 60s")
	return session, delay
}

// grantOptions checks --session and --lock-delay.
func grantOptions(f *flags, session uint64, delay time.Duration) (client.GrantOptions, error) {
	if session != 0 && f.given("ttl") {
		return client.GrantOptions{}, usageError("--ttl and --session: a lock under a session lives as long as the session")
	}
	if err := checkDuration("lock_delay_ms", delay); err != nil {
		return client.GrantOptions{}, err
	}
	return client.GrantOptions{Session: session, LockDelay: delay}, nil
}
