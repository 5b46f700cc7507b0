package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/fencelock/fencelock/lab"
)

const labUsage = `Usage: fencelock lab [FLAGS]
       fencelock lab replay [FILE|-]

Prints the six blocks of the c11 page, run on fencelock's own lock table and
fence, then the assembly that compares four designs. With no flags every
figure matches the page. 'fencelock lab replay -h' shows replay's usage.
`

func runLab(ctx context.Context, e *env, args []string) error {
	if len(args) > 0 && args[0] == "replay" {
		return named("lab replay", runLabReplay(ctx, e, args[1:]))
	}
	cfg := lab.DefaultConfig()
	f := newFlags(e, "lab", labUsage)
	block := f.Int("block", 0, "print only block `N` (1-6)")
	quiet := f.Bool("quiet", false, "print the assembly only")
	verify := f.Bool("verify", false, "re-derive the page's claims, one PASS/FAIL line each; exit 1 if any fails (with --block, that block's claims; 7 is the assembly)")
	seed := f.Int64("seed", 0, "seed both simulations with `S` (default: the page's 11 for block 5, 23 for the assembly)")
	f.IntVar(&cfg.Ops, "n", cfg.Ops, "operations per simulation")
	f.Var(labDurations(&cfg.TTLs), "ttls", "block 5's lease lengths: a comma-separated `LIST` of durations")
	f.Var(labDurations(&cfg.Gaps), "gaps", "the assembly's check→write gaps to sweep: a `LIST` like --ttls")
	f.Var((*durationValue)(&cfg.CheckGap), "check-gap", "check→write gap of the client check in the assembly's design table")
	plot := f.String("plot", "", "also write SVG charts into directory `DIR`")
	pos, err := f.parse(args)
	if err != nil {
		return err
	}
	if err := noArgs(pos); err != nil {
		return err
	}
	if f.given("seed") {
		cfg.SizingSeed, cfg.AssemblySeed = *seed, *seed
	}
	if err := cfg.Validate(); err != nil {
		return usageError("%v", err)
	}
	maxBlock := lab.Blocks
	if *verify {
		maxBlock = lab.AssemblyBlock
	}
	if *block < 0 || *block > maxBlock {
		return usageError("--block %d: want 1..%d", *block, maxBlock)
	}
	if *quiet && (*block != 0 || *verify) {
		return usageError("--quiet prints the assembly alone; it does not combine with --block or --verify")
	}

	if *plot != "" {
		if err := writePlots(e, *plot, cfg); err != nil {
			return err
		}
	}
	if *verify {
		claims, err := lab.Verify(cfg, *block)
		if err != nil {
			return err
		}
		failed, err := lab.WriteClaims(e.stdout, claims)
		if err != nil {
			return err
		}
		if failed > 0 {
			return &exitError{Code: exitNo, Err: fmt.Errorf("lab: %d of %d claims failed", failed, len(claims))}
		}
		return nil
	}
	return lab.Print(e.stdout, lab.Options{Config: cfg, Block: *block, Quiet: *quiet})
}

// writePlots writes the lab's charts into dir, creating it if needed.
func writePlots(e *env, dir string, cfg lab.Config) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, c := range lab.Charts {
		f, err := os.Create(filepath.Join(dir, c.File))
		if err != nil {
			return err
		}
		err = c.Write(f, cfg)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("lab: writing %s: %w", f.Name(), err)
		}
		fmt.Fprintf(e.stderr, "lab: wrote %s\n", f.Name())
	}
	return nil
}

// labDurations is a lab list flag under the CLI's rule for durations: the
// lab package reads a bare number as seconds (the page's Python), the
// command line refuses it like every other duration flag.
func labDurations(dst *[]time.Duration) *durationList {
	return &durationList{
		dst:   dst,
		parse: lab.ParseDurations,
		str:   func() string { return lab.Durations(*dst).String() },
	}
}
