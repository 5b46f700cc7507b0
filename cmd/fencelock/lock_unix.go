//go:build unix

package main

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
)

// lock runs CMD in a process group of its own (led by its watchdog), so
// that a lost lease stops the whole tree CMD started, not just its first
// process. When lock runs
// in the foreground of its terminal, that group also gets the terminal's
// foreground, as a shell gives it to a job: CMD can read the terminal, and
// Ctrl-C and Ctrl-Z reach CMD (see job).

var (
	sigTerm os.Signal = syscall.SIGTERM
	sigKill os.Signal = syscall.SIGKILL
	sigCont os.Signal = syscall.SIGCONT
	// sigSuspend is the stop lock undoes (Ctrl-Z) rather than end the
	// hold for.
	sigSuspend os.Signal = syscall.SIGTSTP
	// forwardedSignals reach CMD's group when sent to fencelock.
	forwardedSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP}
)

// lockSupported says whether lock can keep its promise here.
func lockSupported() error { return nil }

// joinGroup puts cmd in the process group pgid, and that group in the
// foreground of tty when there is one (the child does it between fork and
// exec, so CMD never runs a moment in the background of its terminal).
func joinGroup(cmd *exec.Cmd, tty *os.File, pgid int) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pgid: pgid}
	if tty != nil {
		cmd.SysProcAttr.Foreground = true
		cmd.SysProcAttr.Ctty = int(tty.Fd())
	}
}

// foregroundTerminal returns the first of lock's streams that is its
// controlling terminal, when lock's process group is that terminal's
// foreground: the terminal lock can hand to CMD. nil: no terminal (a
// pipe, a file, a service), or lock runs in the background of one.
func foregroundTerminal(streams ...any) (tty *os.File, own int) {
	own = syscall.Getpgrp()
	for _, s := range streams {
		f, ok := s.(*os.File)
		if !ok || f == nil {
			continue
		}
		// On a terminal that is not the caller's controlling one,
		// TIOCGPGRP fails (ENOTTY).
		fg, err := unix.IoctlGetInt(int(f.Fd()), unix.TIOCGPGRP)
		if err == nil && fg == own {
			return f, own
		}
	}
	return nil, own
}

// ignoreTTOU lets lock, once CMD's group has the foreground, write to the
// terminal (with stty tostop) and take the foreground back without being
// stopped itself: a stopped lock would stop extending while CMD runs on.
// It lasts for the rest of lock's life: CMD, which would inherit it, has
// been started already.
func ignoreTTOU() { signal.Ignore(syscall.SIGTTOU) }

// setForeground makes pgid the foreground process group of tty.
func setForeground(tty *os.File, pgid int) error {
	return unix.IoctlSetPointerInt(int(tty.Fd()), unix.TIOCSPGRP, pgid)
}

// signalGroup sends s to every process of the group pgid leads.
func signalGroup(pgid int, s os.Signal) {
	if sig, ok := s.(syscall.Signal); ok {
		_ = syscall.Kill(-pgid, sig)
	}
}

// signalName is s as people write it: SIGSTOP, SIGTSTP.
func signalName(s os.Signal) string {
	if sig, ok := s.(syscall.Signal); ok {
		if n := unix.SignalName(sig); n != "" {
			return n
		}
	}
	return s.String()
}

// statusOf is CMD's exit status in the shell's convention.
func statusOf(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// describeExit says how CMD ended, to follow "CMD": "was killed by
// SIGKILL", "exited with status 3".
func describeExit(ps *os.ProcessState) string {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return "was killed by " + signalName(ws.Signal())
	}
	return fmt.Sprintf("exited with status %d", ps.ExitCode())
}
