package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/fencelock/fencelock/internal/replay"
)

const replayUsage = `Usage: fencelock lab replay [FILE|-]

Runs lock calls written in the seed exercise's terms against fencelock's
lock table, one per line, and prints one answer per line. Reads standard
input when FILE is - or absent.

  acquire KEY HOLDER NOW TTL       the new token, or None
  release KEY HOLDER NOW           True if it released, else False
  valid KEY TOKEN                  True or False
  check KEY TOKEN NOW              True if TOKEN is current and alive at NOW
  extend KEY HOLDER TOKEN NOW TTL  the same token, or None if refused

NOW and TTL are decimal seconds (0, 10, 2.5). Blank lines and lines starting
with # are skipped. A malformed line is reported on stderr with its line
number and prints nothing; the command then exits 2.

Example:
  printf 'acquire r a 0 10\nacquire r b 5 10\nacquire r b 10 10\nvalid r 1\nvalid r 2\n' |
    fencelock lab replay
`

func runLabReplay(_ context.Context, e *env, args []string) error {
	f := newFlags(e, "lab replay", replayUsage)
	pos, err := f.parse(args)
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		return usageError("takes at most one FILE, got %d", len(pos))
	}
	name := ""
	if len(pos) == 1 {
		name = pos[0]
	}
	var in io.Reader = e.stdin
	if name != "" && name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return usageError("%v", err)
		}
		defer f.Close()
		in = f
	}
	bad, err := replay.Run(in, e.stdout, e.stderr)
	if err != nil {
		return &exitError{Code: exitUsage, Err: err}
	}
	if bad > 0 {
		return &exitError{Code: exitUsage, Err: fmt.Errorf("%d malformed line(s)", bad)}
	}
	return nil
}
