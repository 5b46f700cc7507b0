package main

import (
	"context"
	"fmt"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/client"
)

const checkUsage = `Usage: fencelock check KEY TOKEN

Prints true when TOKEN is KEY's current token and its lease is alive, else
false (exit status 1). A resource that keeps its own fence (package fence)
does not need this, and is safer: this answer may be stale by the time a
write based on it lands.
`

func runCheck(ctx context.Context, e *env, args []string) error {
	f, cf := newClientFlags(e, "check", checkUsage)
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
	var valid bool
	err = cf.call(ctx, 0, "check "+pos[0], func(ctx context.Context, c *client.Client) (err error) {
		valid, err = c.Check(ctx, pos[0], token)
		return err
	})
	if err != nil {
		return err
	}
	if *cf.json {
		err = writeJSON(e.stdout, api.CheckResponse{Key: pos[0], Token: token, Valid: valid})
	} else {
		_, err = fmt.Fprintln(e.stdout, valid)
	}
	if err != nil {
		return err
	}
	if !valid {
		return &exitError{Code: exitNo}
	}
	return nil
}
