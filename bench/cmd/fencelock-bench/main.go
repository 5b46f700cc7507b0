// Command fencelock-bench runs fencelock side by side with the lock
// services a user would pick instead (etcd, Redis, ZooKeeper), through the
// same workloads on the same machine. It lives in a module of its own so
// that the fencelock binary carries none of the peers' clients; the plain
// load generator against fencelock alone stays in the product as
// 'fencelock bench'.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// Exit statuses, as the fencelock binary's.
const (
	exitOK          = 0
	exitFailed      = 1 // a run failed
	exitUsage       = 2 // bad usage
	exitUnreachable = 3 // no system under test answered
)

// exitError carries an exit status up to main, the only place that calls
// os.Exit.
type exitError struct {
	Code int
	Err  error
}

func (e *exitError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit status %d", e.Code)
	}
	return e.Err.Error()
}

func (e *exitError) Unwrap() error { return e.Err }

// usageError is bad usage: exit 2 with the message on one line.
func usageError(format string, args ...any) error {
	return &exitError{Code: exitUsage, Err: fmt.Errorf(format, args...)}
}

// env is what a command may touch of the outside world, so tests run
// commands in-process with their own streams.
type env struct {
	stdout io.Writer
	stderr io.Writer
}

type command struct {
	name    string
	summary string
	run     func(ctx context.Context, e *env, args []string) error
}

// commands is the dispatch table, in help order.
var commands = []command{
	{"compare", "run fencelock, etcd, Redis and ZooKeeper through the same workloads; one table", runCompare},
	{"run", "run one workload on one system and print its row of the table", runSystem},
	{"failover", "kill -9 a cluster's leader, time the first grant after it; repeat", runFailover},
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	e := &env{stdout: os.Stdout, stderr: os.Stderr}
	err := run(ctx, e, os.Args[1:])
	stop()
	os.Exit(exitCode(e, err))
}

// exitCode turns the result of run into a process status, printing the
// error in one line on stderr.
func exitCode(e *env, err error) int {
	if err == nil {
		return exitOK
	}
	var xe *exitError
	if errors.As(err, &xe) {
		if xe.Err != nil {
			fmt.Fprintf(e.stderr, "fencelock-bench: %v\n", xe.Err)
		}
		return xe.Code
	}
	fmt.Fprintf(e.stderr, "fencelock-bench: %v\n", err)
	return exitFailed
}

func run(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		printUsage(e.stdout)
		if len(args) == 0 {
			return &exitError{Code: exitUsage}
		}
		return nil
	}
	for _, c := range commands {
		if c.name == args[0] {
			return c.run(ctx, e, args[1:])
		}
	}
	return usageError("unknown command %q (run 'fencelock-bench help' for the list)", args[0])
}

func printUsage(w io.Writer) {
	fmt.Fprintln(w, "fencelock-bench: fencelock side by side with etcd, Redis and ZooKeeper.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Usage: fencelock-bench COMMAND [FLAGS...]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Commands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run 'fencelock-bench COMMAND -h' for a command's flags. Start the peers")
	fmt.Fprintln(w, "with 'bash peers/setup.sh' (in bench/) and a server with 'fencelock server'.")
}

// parseFlags parses a command's flags, which take no arguments. With -h
// it prints usage and the flags on stdout and reports help; a bad flag or
// an argument is a usage error naming the command.
func parseFlags(e *env, fs *flag.FlagSet, usage string, args []string) (help bool, err error) {
	name := fs.Name()
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(e.stdout, usage)
			fs.SetOutput(e.stdout)
			fs.PrintDefaults()
			return true, nil
		}
		return false, usageError("%s: %v (run 'fencelock-bench %s -h')", name, err, name)
	}
	if fs.NArg() > 0 {
		return false, usageError("%s: unexpected argument %q", name, fs.Arg(0))
	}
	return false, nil
}
