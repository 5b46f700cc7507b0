//go:build !unix

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"time"

	"github.com/fencelock/fencelock/client"
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

func joinGroup(*exec.Cmd, *os.File, int) {}

// lockWatchdog is never started here: lock refuses to run CMD.
type lockWatchdog struct {
	gone        chan struct{}
	groupKilled bool
}

func startWatchdog(*env, *clientFlags, *client.Lease) (*lockWatchdog, error) {
	return nil, lockSupported()
}

func (*lockWatchdog) pgid() int                               { return 0 }
func (*lockWatchdog) arm(time.Time, time.Time, time.Duration) {}
func (*lockWatchdog) end(time.Time)                           {}
func (*lockWatchdog) unexpected() bool                        { return false }
func (*lockWatchdog) settle()                                 {}
func (*lockWatchdog) stoppedCMD() bool                        { return false }
func (*lockWatchdog) quit()                                   {}
func (*lockWatchdog) close()                                  {}

func runLockWatchdog(context.Context, *env, []string) error { return lockSupported() }

func foregroundTerminal(...any) (*os.File, int) { return nil, 0 }

func ignoreTTOU() {}

func setForeground(*os.File, int) error { return nil }

func signalName(s os.Signal) string { return s.String() }

func signalGroup(int, os.Signal) {}

func statusOf(ps *os.ProcessState) int { return ps.ExitCode() }

func describeExit(ps *os.ProcessState) string {
	return fmt.Sprintf("exited with status %d", ps.ExitCode())
}
