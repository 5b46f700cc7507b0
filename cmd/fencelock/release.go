package main

import (
	"context"
	"fmt"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/client"
)

const releaseUsage = `Usage: fencelock release KEY --holder H [--token N]

Releases H's live lease on KEY (with --token, only if N is its token).
Prints nothing on success (with --json, the answer). Exit status 1 when H
holds no live lease on KEY: an expired lease is never released, because
it may already belong to someone else.
`

// releaseAnswer is release's --json: the API's answer, with what it was
// asked.
type releaseAnswer struct {
	Holder string `json:"holder"`
	Key    string `json:"key"`
	api.ReleaseResponse
}

func runRelease(ctx context.Context, e *env, args []string) error {
	f, cf := newClientFlags(e, "release", releaseUsage)
	holder := holderFlag(f, "holder `NAME`; required")
	token := f.Uint64("token", 0, "release only the grant with this `N`")
	cf.common(f, "")
	pos, err := f.parse(args)
	if err != nil {
		return err
	}
	if err := wantArgs(pos, 1, 1, "KEY"); err != nil {
		return err
	}
	if *holder == "" {
		return usageError("--holder is required (or set FENCELOCK_HOLDER)")
	}
	var ok bool
	err = cf.call(ctx, 0, "release "+pos[0], func(ctx context.Context, c *client.Client) (err error) {
		ok, err = c.Release(ctx, pos[0], *holder, *token)
		return err
	})
	if err != nil {
		return err
	}
	if *cf.json {
		if err := writeJSON(e.stdout, releaseAnswer{*holder, pos[0], api.ReleaseResponse{Released: ok}}); err != nil {
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
