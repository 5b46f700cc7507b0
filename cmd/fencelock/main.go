// Command fencelock is the single fencelock binary: the lock server, the
// client commands, `lock -- CMD`, the lab and the benchmark.
//
// main is thin: it hands os.Args to run with the process's streams and
// turns what run returns into the exit status. Every command is listed
// once, in the table below; every command parses its flags with newFlags
// and reports a usage error as a usageErr, so all share one usage path.
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
// returning an *exitError (or a usage error); exitCode, called by main, is
// the only place that turns an error into a status.
const (
	exitOK          = 0
	exitNo          = 1 // the answer is no: held by another, not released, token not current
	exitUsage       = 2 // bad usage or bad input
	exitUnreachable = 3 // the server cannot be reached
	// 4 is lock's (exitLost), 5 and 6 cluster's (cluster.go).
	exitDenied = 7 // the ACLs refused the call: no credential, an unknown one, or a policy that does not allow it
	exitQuota  = 8 // the caller's principal is at one of its quotas
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

// env is what a subcommand may touch of the outside world, so tests can run
// subcommands in-process with their own streams.
type env struct {
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	getenv func(string) string
	// probe, when set, is handed a command's flag set in place of parsing
	// (the command then returns errHelp): completion reads the flags from
	// the commands themselves.
	probe func(*flags)
}

// command is one entry of the command table.
type command struct {
	name    string
	summary string // one line, for 'fencelock help'; "": not listed (it moved elsewhere)
	run     func(ctx context.Context, e *env, args []string) error
	usage   string // the text of 'fencelock NAME -h' before the flags
}

// commands is every command fencelock has, in the order 'fencelock help'
// lists them; each one's code lives in a file of its own. It is filled in
// by init because help and the suggestion read it.
var commands []command

func init() {
	commands = []command{
		{"server", "run a durable lock server (HTTP/JSON API)", runServer, serverUsage},
		{"acquire", "acquire a lock (waiting its turn) and print its fencing token", runAcquire, acquireUsage},
		{"extend", "extend a held lock, keeping its token", runExtend, extendUsage},
		{"release", "release a lock you hold", runRelease, releaseUsage},
		{"session", "open, extend or close a session that keeps many locks alive", runSession, sessionUsage},
		{"check", "tell whether a fencing token is current", runCheck, checkUsage},
		{"fence-proxy", "fence an HTTP service by a reverse proxy that refuses stale tokens", runFenceProxy, fenceProxyUsage},
		{"fence", "list the marks of a file fence, or mend one (marks, reset)", runFence, fenceUsage},
		{"get", "show who holds a lock", runGet, getUsage},
		{"list", "list live locks by key prefix", runList, listUsage},
		{"watch", "print the changes on a key or prefix as they happen, resumable by revision", runWatch, watchUsage},
		{"lock", "run a command while holding a lock, with its fencing token", runLock, lockUsage},
		{"cluster", "list, join or remove the nodes of a cluster; make its secret", runCluster, clusterUsage},
		{"acl", "turn authentication on, manage tokens and key-prefix policies", runACL, aclUsage},
		{"recover", "repair a damaged data dir without ever reissuing a token", runRecover, recoverUsage},
		{"lab", "the c11 lab, measured (lab replay: step through lock calls)", runLab, labUsage},
		{"bench", "measure acquire+release cycles/s, p50, p99 against a server", runBench, benchUsage},
		{"version", "print the version and the commit it was built from", runVersion, versionUsage},
		{"help", "show a command's usage, a topic, or this list", runHelp, helpUsage},
		{"completion", "print a bash or zsh completion script", runCompletion, completionUsage},
		{"compare", "", runCompare, ""},                       // hidden: it only says that compare is in the bench module
		{watchdogCommand, "", runLockWatchdog, watchdogUsage}, // hidden: lock's watchdog process (lock_watchdog.go)
	}
}

func main() {
	ctx, stop := signalContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	e := &env{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv}
	err := run(ctx, e, os.Args[1:])
	stop()
	os.Exit(exitCode(e, err))
}

// interrupted is the cause of main's context once fencelock got one of the
// signals it catches. A command it stops (a wait in a queue, say) reports
// it, and exits as a shell says of a process killed by that signal:
// 128+N, 130 for SIGINT (Ctrl-C), 143 for SIGTERM.
type interrupted struct{ sig os.Signal }

func (e *interrupted) Error() string { return "interrupted by " + signalName(e.sig) }

// Is makes the cause match context.Canceled, as signal.NotifyContext's does.
func (e *interrupted) Is(target error) bool { return target == context.Canceled }

// code is the exit status: 128+N.
func (e *interrupted) code() int {
	if n, ok := e.sig.(syscall.Signal); ok {
		return 128 + int(n)
	}
	return 128 + 2
}

// signalContext is signal.NotifyContext with an *interrupted as the
// cause, so that exitCode can tell which signal ended the command.
func signalContext(parent context.Context, sigs ...os.Signal) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(parent)
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, sigs...)
	done := make(chan struct{})
	go func() {
		select {
		case s := <-ch:
			cancel(&interrupted{sig: s})
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(ch)
		close(done)
		cancel(nil)
	}
}

// exitCode turns the result of run into a process status, printing the
// error on stderr: one line, and for bad usage a hint under it.
func exitCode(e *env, err error) int {
	if err == nil {
		return exitOK
	}
	var ue *usageErr
	if errors.As(err, &ue) {
		fmt.Fprintf(e.stderr, "fencelock: %v\n%s\n", ue, ue.Hint())
		return exitUsage
	}
	var xe *exitError
	var in *interrupted
	if !errors.As(err, &xe) && errors.As(err, &in) {
		fmt.Fprintf(e.stderr, "fencelock: %v\n", err)
		return in.code()
	}
	if errors.As(err, &xe) {
		if xe.Err != nil {
			fmt.Fprintf(e.stderr, "fencelock: %v\n", xe.Err)
		}
		return xe.Code
	}
	fmt.Fprintf(e.stderr, "fencelock: %v\n", err)
	return exitNo
}

// run runs the command named by args[0].
func run(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 {
		// Not a mistake worth one line: show what there is, but do not
		// pretend it succeeded.
		printCommands(e.stdout)
		return &exitError{Code: exitUsage}
	}
	name := args[0]
	switch name {
	case "-h", "-help", "--help":
		name = "help"
	case "-version", "--version":
		name = "version"
	}
	c, err := lookup(name)
	if err != nil {
		return err
	}
	return dispatch(ctx, e, c, args[1:])
}

// dispatch runs c: -h is success, and a usage error names the command.
func dispatch(ctx context.Context, e *env, c *command, args []string) error {
	err := c.run(ctx, e, args)
	if errors.Is(err, errHelp) {
		return nil
	}
	var ue *usageErr
	if errors.As(err, &ue) && ue.cmd == "" {
		ue.cmd = c.name
	}
	return err
}

// lookup finds a command by name, or says which one was probably meant.
func lookup(name string) (*command, error) {
	names := make([]string, len(commands))
	for i := range commands {
		if commands[i].name == name {
			return &commands[i], nil
		}
		names[i] = commands[i].name
	}
	msg := fmt.Sprintf("unknown command %q", name)
	if s := suggest(name, names); s != "" {
		msg += fmt.Sprintf("; did you mean %q?", s)
	}
	return nil, (&usageErr{message: msg, hint: "Run 'fencelock help' for the list of commands."}).exit()
}

func printCommands(w io.Writer) {
	fmt.Fprintln(w, "fencelock: leases with fencing tokens.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Usage: fencelock COMMAND [ARGS...] [FLAGS]")
	fmt.Fprintln(w, "       fencelock --version")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Commands:")
	width := 10
	for _, c := range commands {
		if c.summary != "" {
			width = max(width, len(c.name))
		}
	}
	for _, c := range commands {
		if c.summary == "" {
			continue
		}
		fmt.Fprintf(w, "  %-*s %s\n", width, c.name, c.summary)
	}
	printTopics(w)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run 'fencelock help COMMAND' (or 'fencelock COMMAND -h') for a command's flags,")
	fmt.Fprintln(w, "'fencelock help TOPIC' for a topic, 'fencelock help --man' for the manual page.")
	fmt.Fprintln(w, "Flags are written --flag (-flag works too), before or after the arguments.")
}
