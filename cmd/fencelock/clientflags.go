package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/fencelock/fencelock/client"
)

// clientFlags are the flags every client command shares.
type clientFlags struct {
	addr    string
	json    bool
	timeout time.Duration
}

const commonFlagsUsage = `
Common flags (accepted before or after the arguments):
  --addr ADDRS     server address host:port, or a comma-separated list of
                   cluster nodes (env FENCELOCK_ADDR; default ` + client.DefaultAddr + `)
  --json           print the answer as JSON (the API's shapes)
  --timeout D      how long to wait for an answer, on top of any --wait (default 10s)
`

const clientFlagsUsage = commonFlagsUsage + `
Exit status: 0 yes; 1 no (held by another, not released, token not
current, no such lock); 2 bad usage or input; 3 the server cannot be
reached or cannot serve.
`

// newClientFlagSet makes a subcommand's flag set with the common flags.
func newClientFlagSet(name string, e *env) (*flag.FlagSet, *clientFlags) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cf := &clientFlags{}
	addr := defaultListen
	if v := e.getenv("FENCELOCK_ADDR"); v != "" {
		addr = v
	}
	fs.StringVar(&cf.addr, "addr", addr, "server `addresses`, comma-separated (env FENCELOCK_ADDR)")
	fs.BoolVar(&cf.json, "json", false, "print JSON")
	fs.DurationVar(&cf.timeout, "timeout", 10*time.Second, "answer timeout, on top of any --wait")
	return fs, cf
}

// errHelp means -h was asked for and the usage has been printed.
var errHelp = errors.New("help")

// parseArgs parses args with fs, accepting flags before and after the
// positional arguments (Go's flag package stops at the first non-flag).
// Everything after a "--" is positional as it stands. On -h it prints usage
// and returns errHelp.
func parseArgs(fs *flag.FlagSet, e *env, usage string, args []string) ([]string, error) {
	var flags, pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if len(a) < 2 || a[0] != '-' {
			pos = append(pos, a)
			continue
		}
		flags = append(flags, a)
		name := strings.TrimLeft(a, "-")
		if strings.Contains(name, "=") {
			continue
		}
		if f := fs.Lookup(name); f != nil && !isBoolFlag(f) && i+1 < len(args) {
			flags = append(flags, args[i+1])
			i++
		}
	}
	if err := fs.Parse(flags); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsageOf(e.stdout, fs, usage)
			return nil, errHelp
		}
		return nil, usageError("%s: %v (run 'fencelock %s -h')", fs.Name(), err, fs.Name())
	}
	return pos, nil
}

func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

func printUsageOf(w io.Writer, fs *flag.FlagSet, usage string) {
	fmt.Fprint(w, usage)
	fmt.Fprintln(w, "\nFlags:")
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
}

// wantArgs checks the number of positional arguments.
func wantArgs(fs *flag.FlagSet, pos []string, min, max int, what string) error {
	if len(pos) < min || len(pos) > max {
		return usageError("%s: want %s, got %d argument(s) (run 'fencelock %s -h')", fs.Name(), what, len(pos), fs.Name())
	}
	return nil
}

func (cf *clientFlags) client() (*client.Client, error) {
	c, err := client.New([]string{cf.addr})
	if err != nil {
		return nil, usageError("--addr: %s", trimPrefix(err))
	}
	return c, nil
}

// call runs fn with a client for the flags' addresses and a context bounded
// by the answer timeout plus wait, and turns fn's error into the command's
// exit status with what as the start of the message.
func (cf *clientFlags) call(ctx context.Context, wait time.Duration, what string, fn func(context.Context, *client.Client) error) error {
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

// callContext bounds one command's calls: the answer timeout plus any wait.
func (cf *clientFlags) callContext(ctx context.Context, wait time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, cf.timeout+wait)
}

// trimPrefix drops the package prefix of client errors: main adds its own.
func trimPrefix(err error) string {
	return strings.ReplaceAll(err.Error(), "fencelock: ", "")
}

// clientFail turns a client error into the command's exit status, with what as the
// start of the one-line message.
func clientFail(what string, err error) error {
	code := exitNo
	switch {
	case errors.Is(err, client.ErrInvalid):
		code = exitUsage
	case errors.Is(err, client.ErrUnreachable), errors.Is(err, client.ErrUnavailable),
		errors.Is(err, context.DeadlineExceeded):
		code = exitUnreachable
	}
	return &exitError{Code: code, Err: fmt.Errorf("%s: %s", what, trimPrefix(err))}
}

// answerNo is the answer "no" (exit 1) with a message.
func answerNo(format string, args ...any) error {
	return &exitError{Code: exitNo, Err: fmt.Errorf(format, args...)}
}

// printGrant answers a grant: the token alone, or the lease as JSON.
func printGrant(e *env, cf *clientFlags, lk client.Lock) error {
	if cf.json {
		return writeJSON(e.stdout, lk)
	}
	_, err := fmt.Fprintln(e.stdout, lk.Token)
	return err
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	return enc.Encode(v)
}

// positiveDuration checks a duration flag.
func positiveDuration(cmd, name string, d time.Duration, zeroOK bool) error {
	if d < 0 || (d == 0 && !zeroOK) {
		return usageError("%s: --%s must be positive, not %v", cmd, name, d)
	}
	return nil
}
