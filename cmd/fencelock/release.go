package main

import (
	"context"
	"fmt"
)

func init() {
	register(command{name: "release", summary: "release a lock you hold", run: runRelease})
}

const releaseUsage = `Usage: fencelock release KEY --holder H [--token N]

Releases H's live lease on KEY (with --token, only if N is its token).
Prints nothing on success. Exit status 1 when H holds no live lease on KEY:
an expired lease is never released, because it may already belong to
someone else.
`

func runRelease(ctx context.Context, e *env, args []string) error {
	fs, cf := newClientFlagSet("release", e)
	holder := fs.String("holder", e.getenv("FENCELOCK_HOLDER"), "holder `name` (env FENCELOCK_HOLDER; required)")
	token := fs.Uint64("token", 0, "release only the grant with this `token`")
	pos, err := parseArgs(fs, e, releaseUsage+clientFlagsUsage, args)
	if err != nil {
		return helpOK(err)
	}
	if err := wantArgs(fs, pos, 1, 1, "KEY"); err != nil {
		return err
	}
	if *holder == "" {
		return usageError("release: --holder is required (or set FENCELOCK_HOLDER)")
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	defer c.Close()
	cctx, cancel := cf.callContext(ctx, 0)
	defer cancel()
	ok, err := c.Release(cctx, pos[0], *holder, *token)
	if err != nil {
		return clientFail("release "+pos[0], err)
	}
	if cf.json {
		if err := writeJSON(e.stdout, map[string]any{"key": pos[0], "holder": *holder, "released": ok}); err != nil {
			return err
		}
	}
	if !ok {
		return answerNo("release %s: %s holds no live lease on it%s", pos[0], *holder, tokenNote(*token))
	}
	return nil
}

func tokenNote(token uint64) string {
	if token == 0 {
		return ""
	}
	return fmt.Sprintf(" with token %d", token)
}
