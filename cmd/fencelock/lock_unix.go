//go:build unix

package main

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
)

// lock runs CMD in a process group of its own, so that a lost lease stops
// the whole tree CMD started, not just its first process.

var (
	sigTerm os.Signal = syscall.SIGTERM
	sigKill os.Signal = syscall.SIGKILL
	// forwardedSignals reach CMD's group when sent to fencelock.
	forwardedSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP}
)

// lockSupported says whether lock can keep its promise here.
func lockSupported() error { return nil }

// newGroup makes cmd the leader of a new process group.
func newGroup(cmd *exec.Cmd) { cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} }

// signalGroup sends s to every process of the group pgid leads.
func signalGroup(pgid int, s os.Signal) {
	if sig, ok := s.(syscall.Signal); ok {
		_ = syscall.Kill(-pgid, sig)
	}
}

// statusOf is CMD's exit status in the shell's convention.
func statusOf(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

func describeExit(ps *os.ProcessState) string {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return "was stopped by " + ws.Signal().String()
	}
	return fmt.Sprintf("exited with status %d", ps.ExitCode())
}
