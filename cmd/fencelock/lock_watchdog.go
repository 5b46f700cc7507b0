package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/clock"
)

// The watchdog. `fencelock lock` must stop CMD before the lease could be
// granted to anyone else, even when fencelock itself is stopped (SIGSTOP,
// a debugger) or starved: a keep-alive that does not run cannot notice
// that its lease is lost. So lock starts a second, small process first,
// this binary run as `fencelock lock-watchdog`, which leads the process
// group CMD then joins. It holds two absolute instants on the machine's
// monotonic clock: when to send CMD's group SIGTERM (the lease's
// Deadline) and when SIGKILL (its StopBy). lock pushes both forward over
// a pipe each time an extension is confirmed; if they pass without a push
// the watchdog signals the group itself, whatever state lock is in. If
// lock goes away without saying so (kill -9), the watchdog sends SIGTERM
// at once and SIGKILL at the last StopBy it was given.
//
// Leading CMD's group keeps its id from being reused while either side
// may signal it: the group id is the watchdog's pid, and lock reaps the
// watchdog only after CMD and the whole group are gone. The watchdog
// ignores the signals lock forwards to the group and those a terminal
// sends it (SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGTSTP, SIGTTIN, SIGTTOU);
// the SIGKILL that ends the group ends it too.
//
// Only a frozen machine (or a frozen watchdog) is left: that is what the
// fence at the resource is for.
//
// The pipe from lock carries lines:
//
//	arm TERM KILL   the deadlines, in nanoseconds of CLOCK_MONOTONIC
//	end KILL        lock is ending CMD itself (it sent SIGTERM): keep only
//	                the SIGKILL deadline, and say nothing
//	quit            exit at once (CMD never started)
//
// The watchdog answers on its stdout: "ready" once its signals are
// ignored, then "term" and "kill" just before it sends them, so that lock
// knows its end (by the group's SIGKILL) was its own doing, and that CMD
// was stopped by it: lock then exits 4, whatever CMD's status.

// watchdogCommand is the hidden command the watchdog runs as.
const watchdogCommand = "lock-watchdog"

const watchdogUsage = `Usage: fencelock lock-watchdog --key KEY --token N --parent PID --term NS --kill NS [--json]

Internal: started by 'fencelock lock' to stop CMD's process group when the
lease's deadlines pass without fencelock pushing them forward (see
'fencelock help safe-stop'). Not for use by hand.
`

// watchdog is the watchdog's logic, on an injected clock; signal sends to
// CMD's group and reports whether any process was there to receive it,
// tell answers lock ("term", "kill"), and report says on stderr what was
// done and why.
type watchdog struct {
	clk    clock.Clock
	signal func(os.Signal) bool
	tell   func(string)
	report func(why string, killIn time.Duration)
	parent int // lock's pid, for the reports
	// waiting, when set, is called each time run is about to wait (for a
	// line or its timer): tests move a fake clock only then.
	waiting func()

	termAt, killAt time.Time
	termed, ending bool // SIGTERM sent, by us or (ending) by lock
	killed         bool
}

// run enforces the deadlines against the lines read from in, until quit,
// or until SIGKILL has been sent and in has ended. It returns what it
// could not read.
func (w *watchdog) run(in io.Reader) error {
	lines, stop := make(chan string), make(chan struct{})
	var readErr error
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(in)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-stop:
				return
			}
		}
		readErr = sc.Err()
	}()
	defer close(stop)
	tick := make(chan struct{}, 1)
	var timer clock.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	eof := false
	for {
		w.fire(w.clk.Now())
		if w.killed && eof {
			return readErr
		}
		if timer != nil {
			timer.Stop()
			timer = nil
		}
		var next time.Time
		switch {
		case !w.termed && !w.ending:
			next = w.termAt
		case !w.killed:
			next = w.killAt
		}
		if !next.IsZero() {
			timer = w.clk.AfterFunc(next.Sub(w.clk.Now()), func() {
				select {
				case tick <- struct{}{}:
				default:
				}
			})
		}
		if w.waiting != nil {
			w.waiting()
		}
		if eof {
			<-tick
			continue
		}
		select {
		case <-tick:
		case line, ok := <-lines:
			if !ok {
				eof = true
				w.orphaned()
				continue
			}
			if quit := w.handle(line); quit {
				return nil
			}
		}
	}
}

// handle applies one line from lock; it reports whether to quit. A line it
// cannot read is taken as lock's end: nothing it says can be trusted.
func (w *watchdog) handle(line string) (quit bool) {
	f := strings.Fields(line)
	ns := func(s string) (time.Time, bool) {
		n, err := strconv.ParseInt(s, 10, 64)
		return time.Unix(0, n), err == nil
	}
	switch {
	case len(f) == 1 && f[0] == "quit":
		return true
	case len(f) == 3 && f[0] == "arm":
		term, ok1 := ns(f[1])
		kill, ok2 := ns(f[2])
		if ok1 && ok2 {
			// Once CMD has been told to stop, the hold is ending: a push
			// that arrives after that (it was late) changes nothing.
			if !w.termed && !w.ending && !w.killed {
				w.termAt, w.killAt = term, kill
			}
			return false
		}
	case len(f) == 2 && f[0] == "end":
		if kill, ok := ns(f[1]); ok {
			w.ending = true
			if kill.Before(w.killAt) {
				w.killAt = kill
			}
			return false
		}
	}
	w.orphaned()
	return false
}

// orphaned: lock is gone, or said something unreadable. CMD is sent
// SIGTERM now (unless it was already), SIGKILL at the last deadline.
func (w *watchdog) orphaned() {
	if w.termed || w.ending || w.killed {
		return
	}
	w.termed = true
	w.tell("term") // before the signal: lock must know why CMD ended
	if w.signal(sigTerm) {
		w.signal(sigCont)
		w.report(fmt.Sprintf("watchdog: fencelock (pid %d) went away while CMD ran; sending SIGTERM to CMD", w.parent),
			w.killAt.Sub(w.clk.Now()))
	}
}

// fire sends what is due at now.
func (w *watchdog) fire(now time.Time) {
	if !w.termed && !w.ending && !now.Before(w.termAt) {
		w.termed = true
		w.tell("term") // before the signal: lock must know why CMD ended
		if w.signal(sigTerm) {
			w.signal(sigCont) // a stopped CMD must be able to act on it
			w.report(fmt.Sprintf("watchdog: fencelock (pid %d) confirmed no extension by the lease's deadline (is it stopped?); sending SIGTERM to CMD", w.parent),
				w.killAt.Sub(now))
		}
	}
	if !w.killed && !now.Before(w.killAt) {
		w.killed = true
		if !w.ending {
			w.report("watchdog: sending SIGKILL to CMD", -1)
		}
		// The group is ours too: this ends the watchdog, after every
		// member has been sent the signal.
		w.tell("kill")
		w.signal(sigKill)
	}
}

// watchdogReporter writes the watchdog's reports to stderr as lock would:
// a text line, or with --json a lockEvent "watchdog".
func watchdogReporter(stderr io.Writer, key string, token uint64, json bool) func(string, time.Duration) {
	return func(why string, killIn time.Duration) {
		if json {
			ev := lockEvent{Key: key, Token: token, Event: "watchdog", Error: why}
			if killIn >= 0 {
				ms := api.Ms(killIn)
				ev.SIGKILLInMs = &ms
			}
			_ = writeJSON(stderr, ev)
			return
		}
		if killIn >= 0 {
			why += fmt.Sprintf(", SIGKILL in %v", killIn.Round(time.Millisecond))
		}
		fmt.Fprintf(stderr, "fencelock: lock %s: %s\n", key, why)
	}
}
