package main

import (
	"os/exec"
	"testing"
	"time"
)

// TestNoAddressReachesTheTripwire checks the guard of TestMain: a client
// command given no --addr, run in-process with an empty environment or as
// the binary with the test's environment, reaches the tripwire, never
// 127.0.0.1:7470 (where a user's dev server may run and once took the
// suite's writes: its tokens jumped from 4 to 596). The test takes its own
// hits; any other connection to the tripwire fails the run. It stays
// serial: a parallel test's stray connection would count as its hit.
func TestNoAddressReachesTheTripwire(t *testing.T) {
	if defaultListen == "127.0.0.1:7470" {
		t.Fatal("the default address was not redirected")
	}
	guard.Take()
	t.Run("in-process", func(t *testing.T) {
		_, _, code := runCLI(t, "", "get", "k", "--timeout", "2s")
		if code != exitUnreachable {
			t.Errorf("in-process get with no --addr exited %d, want %d (unreachable)", code, exitUnreachable)
		}
		if hits := takeHits(); hits == 0 {
			t.Error("in-process get with no --addr did not reach the tripwire")
		}
	})
	t.Run("binary", func(t *testing.T) {
		out, err := exec.Command(fencelockBinary(t), "get", "k", "--timeout", "2s").CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != exitUnreachable {
			t.Errorf("the binary with no --addr: %v, want exit %d; output %s", err, exitUnreachable, out)
		}
		if hits := takeHits(); hits == 0 {
			t.Errorf("the binary with no --addr did not reach the tripwire; output %s", out)
		}
	})
}

// takeHits waits, bounded, for the tripwire to record a connection and
// takes them all.
func takeHits() int {
	n := 0
	for deadline := time.Now().Add(5 * time.Second); n == 0 && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		n += len(guard.Take())
	}
	return n
}
