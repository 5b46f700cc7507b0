//go:build linux

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestLockWatchdogStopsCMDOfAFrozenLock is issue 26's freeze: fencelock
// lock is SIGSTOPped (its CMD and its watchdog are not) past its TTL. The
// watchdog ends CMD, and the worker CMD left in the background, which
// both ignore SIGTERM, by SIGKILL before the server can grant the key to
// anyone else: when B's CMD starts, under the next grant, it finds A's
// processes dead (zombies nobody has reaped: their parent is frozen, or
// gone). Before the watchdog they were still running then, and were
// killed only after SIGCONT.
func TestLockWatchdogStopsCMDOfAFrozenLock(t *testing.T) {
	t.Parallel()
	srvDir := t.TempDir()
	addr := freeAddr(t)
	startProc(t, srvDir, nil, "--listen", addr, "--data", filepath.Join(srvDir, "data")).waitReady(addr)
	dir := t.TempDir()
	script := `trap '' TERM
(trap '' TERM; echo $BASHPID > worker.tmp; mv worker.tmp worker; while :; do sleep 0.05; done) &
echo $$ > cmd.tmp; mv cmd.tmp cmd
while :; do sleep 0.05; done`
	a := startBG(t, dir, nil, "lock", "frozen/k", "--addr", addr, "--holder", "A", "--ttl", "3s", "--", "bash", "-c", script)
	eventually(t, "A's CMD and worker", func() bool {
		return fileExists(filepath.Join(dir, "cmd")) && fileExists(filepath.Join(dir, "worker"))
	})
	cmdPid, worker := readPid(t, filepath.Join(dir, "cmd")), readPid(t, filepath.Join(dir, "worker"))
	pgid, err := syscall.Getpgid(cmdPid)
	if err != nil || pgid == cmdPid || pgid == a.cmd.Process.Pid {
		t.Fatalf("CMD %d in group %d (%v); want the watchdog's group, led by neither CMD nor lock %d", cmdPid, pgid, err, a.cmd.Process.Pid)
	}
	if err := syscall.Kill(a.cmd.Process.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitStopped(t, a.cmd.Process.Pid)

	// B queues for the key and is granted it once A's lease has expired
	// on the server; its CMD looks at A's processes the moment it runs.
	b := startBG(t, dir, nil, "lock", "frozen/k", "--addr", addr, "--holder", "B", "--ttl", "10s", "--wait", "30s", "--",
		"sh", "-c", fmt.Sprintf(`for p in %d %d; do cut -d' ' -f3 /proc/$p/stat 2>/dev/null || echo gone; done > seen`, cmdPid, worker))
	if code := b.exitCode(t); code != 0 {
		t.Fatalf("B: exit %d, stderr %q", code, b.stderr.String())
	}
	seen, err := os.ReadFile(filepath.Join(dir, "seen"))
	if err != nil {
		t.Fatal(err)
	}
	for i, state := range strings.Fields(string(seen)) {
		if state != "Z" && state != "gone" {
			t.Errorf("A's %s was %q when B's CMD ran under the next grant; want dead (Z or gone)", []string{"CMD", "worker"}[i], state)
		}
	}
	if !strings.Contains(a.stderr.String(), "watchdog: fencelock (pid "+strconv.Itoa(a.cmd.Process.Pid)+") confirmed no extension by the lease's deadline") {
		t.Errorf("A's stderr %q: the watchdog did not say what it did", a.stderr.String())
	}

	if err := syscall.Kill(a.cmd.Process.Pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if code := a.exitCode(t); code != exitLost {
		t.Fatalf("A: exit %d, want %d; stderr %q", code, exitLost, a.stderr.String())
	}
	if want := "lost: lease expired; CMD was killed by SIGKILL"; !strings.Contains(a.stderr.String(), want) {
		t.Errorf("A's stderr %q lacks %q", a.stderr.String(), want)
	}
	if left := alive(groupMembers(pgid)); len(left) != 0 {
		t.Errorf("processes alive in A's group after it exited: %v", left)
	}
}

// TestLockWatchdogOutlivesAKilledLock: fencelock lock is killed with
// SIGKILL while CMD runs. Nothing is left to release the lease or report,
// but CMD must not run on without it: the watchdog sees its pipe close,
// sends SIGTERM at once and SIGKILL by the lease's stop-by time, and the
// group is gone.
func TestLockWatchdogOutlivesAKilledLock(t *testing.T) {
	t.Parallel()
	srvDir := t.TempDir()
	addr := freeAddr(t)
	startProc(t, srvDir, nil, "--listen", addr, "--data", filepath.Join(srvDir, "data")).waitReady(addr)
	dir := t.TempDir()
	a := startBG(t, dir, nil, "lock", "killed/k", "--addr", addr, "--ttl", "2s", "--",
		"sh", "-c", `trap '' TERM; echo $$ > cmd.tmp; mv cmd.tmp cmd; while :; do sleep 0.05; done`)
	eventually(t, "A's CMD", func() bool { return fileExists(filepath.Join(dir, "cmd")) })
	cmdPid := readPid(t, filepath.Join(dir, "cmd"))
	pgid, err := syscall.Getpgid(cmdPid)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-a.done
	eventually(t, "A's group to end", func() bool { return len(alive(groupMembers(pgid))) == 0 })
	if !strings.Contains(a.stderr.String(), "went away while CMD ran; sending SIGTERM to CMD") {
		t.Errorf("stderr %q: the watchdog did not say why it ended CMD", a.stderr.String())
	}
}
