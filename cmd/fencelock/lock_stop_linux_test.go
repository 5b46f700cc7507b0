//go:build linux

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/client/clienttest"
)

// stopCMD runs lock in-process with CMD sh -c script, in which READY
// stands for writing the shell's pid to a file (put it after whatever
// must be in place before the stop), SIGSTOPs that process once the file
// is there, and returns lock's status and stderr. Nothing waits for a lease to run out: the stop itself ends the
// hold.
func stopCMD(t *testing.T, srv *clienttest.Server, script string, lockArgs ...string) (int, string) {
	t.Helper()
	pidFile := filepath.Join(t.TempDir(), "cmd.pid")
	t.Setenv("PIDFILE", pidFile) // CMD inherits the test's environment
	type result struct {
		code int
		errs string
	}
	resc := make(chan result, 1)
	go func() {
		ready := `echo $$ > "$PIDFILE.tmp"; mv "$PIDFILE.tmp" "$PIDFILE"`
		args := append(append([]string{"lock", "k"}, lockArgs...), "--", "sh", "-c", strings.Replace(script, "READY", ready, 1))
		code, _, errs := runClientCLI(t, map[string]string{"FENCELOCK_ADDR": srv.Addr}, args...)
		resc <- result{code, errs}
	}()
	var pid int
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if b, err := os.ReadFile(pidFile); err == nil {
			if pid, err = strconv.Atoi(strings.TrimSpace(string(b))); err != nil {
				t.Fatal(err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("CMD never started")
		}
	}
	if _, _, held := srv.Holder("k"); !held {
		t.Fatal("CMD runs but the lock is not held")
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-resc:
		return r.code, r.errs
	case <-time.After(30 * time.Second): // a hang, not a measure
		_ = syscall.Kill(pid, syscall.SIGKILL)
		t.Fatal("lock kept the lock for a stopped CMD")
		return 0, ""
	}
}

// TestLockStoppedCMDEndsTheHold: a CMD stopped by SIGSTOP does not keep
// the lock: lock says so, ends CMD, releases and exits 4, with a lease
// that would otherwise have been extended forever.
func TestLockStoppedCMDEndsTheHold(t *testing.T) {
	srv := clienttest.NewServer(client.SystemClock{})
	defer srv.Close()
	code, errs := stopCMD(t, srv, `READY; while :; do sleep 0.05; done`, "--ttl", "1m")
	if code != exitLost {
		t.Fatalf("exit %d, want %d; stderr %q", code, exitLost, errs)
	}
	for _, want := range []string{
		"fencelock: lock k: CMD was stopped by SIGSTOP, and a stopped command must not hold the lock; sending SIGTERM and SIGCONT to CMD, SIGKILL in ",
		"CMD was killed by SIGTERM\n", // SIGTERM took effect once CMD continued
	} {
		if !strings.Contains(errs, want) {
			t.Errorf("stderr %q lacks %q", errs, want)
		}
	}
	if _, _, held := srv.Holder("k"); held {
		t.Fatal("the lock is still held after the stopped CMD was ended")
	}
}

// TestLockStoppedCMDIgnoringTERMIsKilled: a CMD that ignores SIGTERM is
// killed when the grace period ends, and the lock released after that.
func TestLockStoppedCMDIgnoringTERMIsKilled(t *testing.T) {
	srv := clienttest.NewServer(client.SystemClock{})
	defer srv.Close()
	code, errs := stopCMD(t, srv, `trap '' TERM; READY; while :; do sleep 0.05; done`, "--ttl", "500ms", "--json")
	if code != exitLost {
		t.Fatalf("exit %d, want %d; stderr %q", code, exitLost, errs)
	}
	lines := strings.Split(strings.TrimSuffix(errs, "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("stderr %q: want the grant, the stop and the error", errs)
	}
	var stopped lockEvent
	if err := json.Unmarshal([]byte(lines[1]), &stopped); err != nil || stopped.Event != "stopped" || stopped.SIGKILLInMs == nil ||
		!strings.Contains(stopped.Error, "SIGSTOP") {
		t.Errorf("stop line %q: %+v, %v", lines[1], stopped, err)
	}
	if want := "CMD was killed by SIGKILL"; !strings.HasSuffix(lines[2], want) {
		t.Errorf("last line %q, want it to end in %q", lines[2], want)
	}
	if _, _, held := srv.Holder("k"); held {
		t.Fatal("the lock is still held after the stopped CMD was killed")
	}
}

// TestLockWatchdogKilledEndsTheHold: CMD's watchdog (its process group's
// leader) is killed by someone. A freeze of lock's would no longer stop
// CMD, so lock ends the hold as on a loss: SIGTERM, release, exit 4.
func TestLockWatchdogKilledEndsTheHold(t *testing.T) {
	srv := clienttest.NewServer(client.SystemClock{})
	defer srv.Close()
	// Field 5 of /proc/PID/stat is the process group: the watchdog's pid.
	code, _, errs := runClientCLI(t, map[string]string{"FENCELOCK_ADDR": srv.Addr}, "lock", "k", "--ttl", "1m", "--",
		"sh", "-c", `read -r _ _ _ _ pg _ < /proc/$$/stat; kill -KILL "$pg"; while :; do sleep 0.05; done`)
	if code != exitLost {
		t.Fatalf("exit %d, want %d; stderr %q", code, exitLost, errs)
	}
	for _, want := range []string{"ended, and CMD must not run without it; sending SIGTERM to CMD", "CMD was killed by SIGTERM"} {
		if !strings.Contains(errs, want) {
			t.Errorf("stderr %q lacks %q", errs, want)
		}
	}
	if _, _, held := srv.Holder("k"); held {
		t.Fatal("the lock is still held after the hold ended")
	}
}
