// Command fencelock is the single fencelock binary: the lock server, the
// client commands, `lock -- CMD`, the lab and the benchmark.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// Exit statuses shared by every subcommand. A subcommand reports them by
// returning an *exitError; main is the only place that calls os.Exit.
const (
	exitOK          = 0
	exitNo          = 1 // the answer is no: held by another, not released, token not current
	exitUsage       = 2 // bad usage or bad input
	exitUnreachable = 3 // the server cannot be reached
)

// exitError carries an exit status up to main. A nil Err means "exit with
// Code and print nothing".
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

// usageError is bad usage: it exits 2 and prints the message with a hint.
func usageError(format string, args ...any) error {
	return &exitError{Code: exitUsage, Err: fmt.Errorf(format, args...)}
}

// env is what a subcommand may touch of the outside world, so tests can run
// subcommands in-process with their own streams.
type env struct {
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	getenv func(string) string
}

type command struct {
	name    string
	summary string
	run     func(ctx context.Context, e *env, args []string) error
	hidden  bool // not listed in help: a command that moved elsewhere
}

// commands is the dispatch table; each entry lives in a file of its own.
var commands []command

func register(c command) { commands = append(commands, c) }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	e := &env{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv}
	err := run(ctx, e, os.Args[1:])
	stop()
	os.Exit(exitCode(e, err))
}

// exitCode turns the result of run into a process status, printing the error
// in one line on stderr.
func exitCode(e *env, err error) int {
	if err == nil {
		return exitOK
	}
	var xe *exitError
	if errors.As(err, &xe) {
		if xe.Err != nil {
			fmt.Fprintf(e.stderr, "fencelock: %v\n", xe.Err)
		}
		return xe.Code
	}
	fmt.Fprintf(e.stderr, "fencelock: %v\n", err)
	return exitNo
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
	return usageError("unknown command %q (run 'fencelock help' for the list)", args[0])
}

func printUsage(w io.Writer) {
	fmt.Fprintln(w, "fencelock: leases with fencing tokens.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Usage: fencelock COMMAND [ARGS...]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Commands:")
	for _, c := range commands {
		if c.hidden {
			continue
		}
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run 'fencelock COMMAND -h' for a command's flags.")
}
