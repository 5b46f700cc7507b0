package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/client"
)

// clientFlags are the flags every client command shares.
type clientFlags struct {
	addr      *string
	json      *bool
	timeout   *time.Duration
	tls       *clientTLSFlags
	authToken *string
}

// clientExit is the exit status text of the client commands.
const clientExit = `Exit status: 0 yes; 1 no (held by another, not released, token not
current, no such lock); 2 bad usage or input (a bad --addr, TLS set up
wrong); 3 the server cannot be reached or cannot serve; 7 refused by the
ACLs; 8 over a quota; 130, 143 interrupted by SIGINT or SIGTERM. See
'fencelock help exit-codes'.
`

// newClientFlags makes a client command's flags with the common ones
// after its own (added by the caller before parse).
func newClientFlags(e *env, cmd, usage string) (*flags, *clientFlags) {
	f := newFlags(e, cmd, usage)
	f.after = clientExit
	return f, &clientFlags{}
}

// common adds the shared flags; called after the command's own, so that
// they are listed last.
func (cf *clientFlags) common(f *flags, jsonUsage string) {
	cf.addr = f.String("addr", defaultListen, "server `ADDRS`: host:port, or a comma-separated list of cluster nodes")
	f.Env("addr", "FENCELOCK_ADDR")
	if jsonUsage == "" {
		jsonUsage = "print the answer as JSON (the API's shapes, package api)"
	}
	cf.json = f.Bool("json", false, jsonUsage)
	cf.timeout = f.Duration("timeout", 10*time.Second, "how long to wait for an answer, on top of any --wait")
	cf.tls = addClientTLSFlags(f)
	cf.authToken = authTokenFlag(f)
}

func (cf *clientFlags) client() (*client.Client, error) {
	cfg, err := cf.tls.config()
	if err != nil {
		return nil, err
	}
	opts := authOption(*cf.authToken)
	if cfg != nil {
		opts = append(opts, client.WithTLSConfig(cfg))
	}
	c, err := client.New([]string{*cf.addr}, opts...)
	if err != nil {
		return nil, usageError("--addr: %s", trimPrefix(err))
	}
	return c, nil
}

// call runs fn with a client for the flags' addresses and a context bounded
// by the answer timeout plus wait, and turns fn's error into the command's
// exit status with what as the start of the message.
func (cf *clientFlags) call(ctx context.Context, wait time.Duration, what string, fn func(context.Context, *client.Client) error) error {
	if *cf.timeout <= 0 {
		return usageError("--timeout must be positive, not %v", *cf.timeout)
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	defer c.Close()
	cctx, cancel := cf.callContext(ctx, wait)
	defer cancel()
	if err := fn(cctx, c); err != nil {
		return clientFail(what, err)
	}
	return nil
}

// callContext bounds one command's calls: the answer timeout plus any
// wait; a wait without end (waitForever) is bounded by ctx alone.
func (cf *clientFlags) callContext(ctx context.Context, wait time.Duration) (context.Context, context.CancelFunc) {
	if wait < 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, *cf.timeout+wait)
}

// answerNo is the answer "no" (exit 1) with a message.
func answerNo(format string, args ...any) error {
	return &exitError{Code: exitNo, Err: fmt.Errorf(format, args...)}
}

// apiLease is a grant in the API's shape, the JSON every command prints for
// one.
func apiLease(lk client.Lock) api.Lease {
	l := api.Lease{Key: lk.Key, Holder: lk.Holder, Token: lk.Token, TTLMs: api.Ms(lk.TTL), RemainingMs: api.Ms(lk.Remaining),
		Kind: lk.Kind, Permits: lk.Permits, Mode: lk.Mode, Slot: lk.Slot, Session: lk.Session, Waiting: lk.Waiting}
	for _, h := range lk.Holders {
		l.Holders = append(l.Holders, apiLease(h))
	}
	if w := lk.NextWaiter; w != nil {
		l.NextWaiter = &api.Waiter{Holder: w.Holder, WaitedMs: api.Ms(w.Waited), LeftMs: api.Ms(w.Left), Mode: w.Mode, Session: w.Session}
	}
	return l
}

// printGrant answers a grant: the token alone, or the lease as JSON.
func printGrant(e *env, cf *clientFlags, lk client.Lock) error {
	if *cf.json {
		return writeJSON(e.stdout, apiLease(lk))
	}
	_, err := fmt.Fprintln(e.stdout, lk.Token)
	return err
}

func writeJSON(w io.Writer, v any) error {
	return json.NewEncoder(w).Encode(v)
}
