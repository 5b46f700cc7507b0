//go:build !unix

package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
)

// Without process groups lock cannot stop everything CMD started when the
// lease is lost, so it refuses to run CMD at all rather than let part of it
// outlive the lock.

var (
	sigTerm os.Signal = os.Kill
	sigKill os.Signal = os.Kill
	sigCont os.Signal = os.Kill // never sent: lock does not run CMD here
	// sigSuspend is never reported here: watchStops sees no stops.
	sigSuspend os.Signal = nil
	// forwardedSignals reach CMD when sent to fencelock.
	forwardedSignals = []os.Signal{os.Interrupt}
)

// lockSupported refuses lock here, with exit status 126 (CMD could not
// be started), before anything is acquired.
func lockSupported() error {
	return &exitError{Code: 126, Err: fmt.Errorf("lock: not supported on %s: it needs process groups to stop all of CMD when the lease is lost; use acquire, extend and release", runtime.GOOS)}
}

func newGroup(*exec.Cmd, *os.File) {}

func foregroundTerminal(...any) (*os.File, int) { return nil, 0 }

func ignoreTTOU() {}

func setForeground(*os.File, int) error { return nil }

func signalName(s os.Signal) string { return s.String() }

func signalGroup(int, os.Signal) {}

func statusOf(ps *os.ProcessState) int { return ps.ExitCode() }

func describeExit(ps *os.ProcessState) string {
	return fmt.Sprintf("exited with status %d", ps.ExitCode())
}
