package main

import (
	"context"
	"fmt"
)

func init() {
	register(command{name: "check", summary: "tell whether a fencing token is current", run: runCheck})
}

const checkUsage = `Usage: fencelock check KEY TOKEN

Prints true when TOKEN is KEY's current token and its lease is alive, else
false (exit status 1). A resource that keeps its own fence (package fence)
does not need this, and is safer: this answer may be stale by the time a
write based on it lands.
`

func runCheck(ctx context.Context, e *env, args []string) error {
	fs, cf := newClientFlagSet("check", e)
	pos, err := parseArgs(fs, e, checkUsage+clientFlagsUsage, args)
	if err != nil {
		return helpOK(err)
	}
	if err := wantArgs(fs, pos, 2, 2, "KEY TOKEN"); err != nil {
		return err
	}
	token, err := parseToken("check", pos[1])
	if err != nil {
		return err
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	defer c.Close()
	cctx, cancel := cf.callContext(ctx, 0)
	defer cancel()
	valid, err := c.Check(cctx, pos[0], token)
	if err != nil {
		return clientFail("check "+pos[0], err)
	}
	if cf.json {
		err = writeJSON(e.stdout, map[string]any{"key": pos[0], "token": token, "valid": valid})
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
