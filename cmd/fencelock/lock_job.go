package main

import (
	"fmt"
	"os"
	"os/exec"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/client"
)

// job is what lock does with CMD's process group beyond signalling it:
// the terminal's foreground and CMD's stops.
//
// The terminal. When one of lock's streams is its controlling terminal and
// lock is in that terminal's foreground, CMD's group gets the foreground
// (as a shell gives it to a job), so CMD can read the terminal (an editor,
// a prompt) instead of being stopped by SIGTTIN, and Ctrl-C and Ctrl-Z
// reach CMD. lock takes the foreground back when CMD exits, before it
// releases, and when it ends CMD for a stop. Without such a terminal, CMD
// runs in a background group of its own: a CMD that opens /dev/tty then
// is stopped by SIGTTIN and treated as below.
//
// Stops. A stopped CMD must never hold the lock: nothing runs, yet the
// key is taken, and whatever CMD does when it continues may be long after
// it should have stopped. So when CMD's first process stops (Linux only):
//   - SIGTSTP (Ctrl-Z, or kill -TSTP): lock says so and continues CMD at
//     once with SIGCONT; a command under lock cannot be suspended;
//   - SIGSTOP, SIGTTIN, SIGTTOU: lock says so and ends the hold as it
//     does on a loss: SIGTERM and SIGCONT to CMD's group, SIGKILL when the
//     grace period ends, the lock released once CMD is gone, exit status 4.
type job struct {
	tty    *os.File // the terminal CMD's group is given; nil: none
	own    int      // lock's own process group
	handed bool     // CMD's group has the foreground
	quit   chan struct{}
	done   <-chan struct{} // closed when the stop watcher is gone
}

// newJob prepares cmd to run in the process group pgid (the watchdog's),
// in the foreground of lock's terminal if lock has it.
func newJob(cmd *exec.Cmd, e *env, pgid int) *job {
	tty, own := foregroundTerminal(e.stdin, e.stdout, e.stderr)
	joinGroup(cmd, tty, pgid)
	return &job{tty: tty, own: own, quit: make(chan struct{})}
}

// started is called once CMD runs: it returns CMD's stops.
func (j *job) started(pid int) <-chan os.Signal {
	if j.tty != nil {
		j.handed = true
		ignoreTTOU()
	}
	stops, done := watchStops(pid, j.quit)
	j.done = done
	return stops
}

// takeBack makes lock's own group the terminal's foreground again.
func (j *job) takeBack() {
	if j.handed {
		j.handed = false
		ignoreTTOU() // from the background, tcsetpgrp raises SIGTTOU
		_ = setForeground(j.tty, j.own)
	}
}

// finish takes the terminal back (also when CMD failed to start after it
// was given it: the child sets the foreground before exec) and waits for
// the stop watcher.
func (j *job) finish() {
	if j.tty != nil {
		j.handed = true // a failed exec may have given it away already
	}
	j.takeBack()
	close(j.quit)
	if j.done != nil {
		<-j.done
	}
}

// stopped handles a stop of CMD's first process by sig (see job). It
// returns a nil error when CMD was continued, else why the hold ends,
// after saying so and sending SIGTERM and SIGCONT, and grace, how long
// CMD has before SIGKILL.
func (j *job) stopped(e *env, cf *clientFlags, lease *client.Lease, sig os.Signal, send func(os.Signal)) (grace time.Duration, ended error) {
	key, name := lease.Key(), signalName(sig)
	if sig == sigSuspend {
		why := fmt.Sprintf("CMD was suspended (%s), but a command cannot be suspended while it holds the lock", name)
		if *cf.json {
			_ = writeJSON(e.stderr, lockEvent{Key: key, Token: lease.Token(), Event: "continued", Error: why})
		} else {
			fmt.Fprintf(e.stderr, "fencelock: lock %s: %s: continuing it\n", key, why)
		}
		send(sigCont)
		return 0, nil
	}
	j.takeBack()
	ended = fmt.Errorf("CMD was stopped by %s, and a stopped command must not hold the lock", name)
	grace = max(time.Until(lease.StopBy()), 0)
	if *cf.json {
		kill := api.Ms(grace)
		_ = writeJSON(e.stderr, lockEvent{Key: key, Token: lease.Token(), Event: "stopped", Error: ended.Error(), SIGKILLInMs: &kill})
	} else {
		fmt.Fprintf(e.stderr, "fencelock: lock %s: %s; sending SIGTERM and SIGCONT to CMD, SIGKILL in %v, then releasing\n", key, ended, grace.Round(time.Millisecond))
	}
	send(sigTerm)
	send(sigCont)
	return grace, ended
}
