//go:build linux

package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/client/clienttest"
)

// openPTY opens a pseudo-terminal: the master the test types into and
// reads from, and the slave that becomes fencelock's terminal.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		m.Close()
		t.Fatalf("unlockpt: %v", err)
	}
	n, err := unix.IoctlGetUint32(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		m.Close()
		t.Fatalf("ptsname: %v", err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		m.Close()
		t.Fatalf("opening the slave: %v", err)
	}
	t.Cleanup(func() { m.Close(); s.Close() })
	return m, s
}

// terminalLock is fencelock lock run by a job-control shell (sh with set
// -m) in a session of its own, with a pseudo-terminal as its controlling
// terminal, stdin and stdout: as typed at a prompt, fencelock is a job in
// a process group of its own, in the terminal's foreground, and its
// parent, the shell, is in the same session (so its group is not
// orphaned, and a background tcsetpgrp would stop it with SIGTTOU).
// stderr is kept apart.
type terminalLock struct {
	t      *testing.T
	cmd    *exec.Cmd
	master *os.File
	screen syncBuffer // what was written to the terminal, echo included
	stderr syncBuffer
	done   chan struct{}
}

func startTerminalLock(t *testing.T, args ...string) *terminalLock {
	t.Helper()
	master, slave := openPTY(t)
	tl := &terminalLock{t: t, master: master, done: make(chan struct{})}
	tl.cmd = exec.Command("sh", append([]string{"-c", `set -m; "$@"`, "sh", fencelockBinary(t)}, args...)...)
	tl.cmd.Stdin, tl.cmd.Stdout, tl.cmd.Stderr = slave, slave, &tl.stderr
	// Setsid makes the shell a session leader, Setctty the slave (its fd
	// 0) its controlling terminal.
	tl.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := tl.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close() // fencelock and CMD keep theirs: reads end when they exit
	go func() {
		defer close(tl.done)
		buf := make([]byte, 1024)
		for {
			n, err := master.Read(buf)
			tl.screen.Write(buf[:n])
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		if tl.cmd.ProcessState == nil {
			_ = tl.cmd.Process.Kill()
			_ = tl.cmd.Wait()
		}
	})
	return tl
}

// waitFor waits until cond holds; the bound only keeps a broken lock
// from hanging the test, it decides nothing.
func (tl *terminalLock) waitFor(what string, cond func() bool) {
	tl.t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			tl.t.Fatalf("never saw %s; terminal %q, stderr %q", what, tl.screen.String(), tl.stderr.String())
		}
	}
}

func (tl *terminalLock) waitScreen(s string) {
	tl.t.Helper()
	tl.waitFor(fmt.Sprintf("%q on the terminal", s), func() bool { return strings.Contains(tl.screen.String(), s) })
}

func (tl *terminalLock) waitStderr(s string) {
	tl.t.Helper()
	tl.waitFor(fmt.Sprintf("%q on stderr", s), func() bool { return strings.Contains(tl.stderr.String(), s) })
}

func (tl *terminalLock) typeIn(s string) {
	tl.t.Helper()
	if _, err := tl.master.WriteString(s); err != nil {
		tl.t.Fatal(err)
	}
}

// foreground is the terminal's foreground process group (a pty master
// may ask for its slave's).
func (tl *terminalLock) foreground() int {
	pgid, err := unix.IoctlGetInt(int(tl.master.Fd()), unix.TIOCGPGRP)
	if err != nil {
		tl.t.Fatalf("TIOCGPGRP: %v", err)
	}
	return pgid
}

// exit waits for fencelock (and the shell, which exits with its status)
// to exit and returns its status.
func (tl *terminalLock) exit() int {
	tl.t.Helper()
	exited := make(chan struct{})
	go func() { _ = tl.cmd.Wait(); close(exited) }()
	tl.waitFor("fencelock exit", func() bool {
		select {
		case <-exited:
			return true
		default:
			return false
		}
	})
	<-tl.done
	return tl.cmd.ProcessState.ExitCode()
}

// TestLockTerminalCMDReadsIt: a CMD that reads the terminal gets the line
// typed at it. Before CMD was given the terminal's foreground it was
// stopped by SIGTTIN at its first read, and lock hung, holding the lock.
func TestLockTerminalCMDReadsIt(t *testing.T) {
	srv := clienttest.NewServer(client.SystemClock{})
	defer srv.Close()
	tl := startTerminalLock(t, "lock", "k", "--addr", srv.Addr, "--",
		"sh", "-c", `if [ -t 0 ]; then echo on-a-tty; fi; read line; echo "got:$line"; exit 3`)
	tl.waitScreen("on-a-tty")
	tl.typeIn("hello\n")
	tl.waitScreen("got:hello")
	if code := tl.exit(); code != 3 {
		t.Fatalf("exit %d, want CMD's 3; stderr %q", code, tl.stderr.String())
	}
	if _, _, held := srv.Holder("k"); held {
		t.Fatal("the lock is still held after CMD exited")
	}
	if s := tl.stderr.String(); s != "" {
		t.Errorf("stderr %q, want nothing", s)
	}
}

// TestLockTerminalCtrlC: Ctrl-C reaches CMD, which is in the foreground;
// lock releases and exits with CMD's status.
func TestLockTerminalCtrlC(t *testing.T) {
	srv := clienttest.NewServer(client.SystemClock{})
	defer srv.Close()
	tl := startTerminalLock(t, "lock", "k", "--addr", srv.Addr, "--",
		"sh", "-c", `echo ready; read line; echo not-interrupted`)
	tl.waitScreen("ready")
	tl.typeIn("\x03")
	if code := tl.exit(); code != 128+int(syscall.SIGINT) {
		t.Fatalf("exit %d, want %d (CMD killed by SIGINT); stderr %q", code, 128+int(syscall.SIGINT), tl.stderr.String())
	}
	if strings.Contains(tl.screen.String(), "not-interrupted") {
		t.Fatal("CMD went on after Ctrl-C")
	}
	if _, _, held := srv.Holder("k"); held {
		t.Fatal("the lock is still held after Ctrl-C")
	}
}

// TestLockTerminalCtrlZContinues: Ctrl-Z stops CMD; lock says so and
// continues it, rather than hold the lock for a stopped command; CMD
// then reads on.
func TestLockTerminalCtrlZContinues(t *testing.T) {
	srv := clienttest.NewServer(client.SystemClock{})
	defer srv.Close()
	tl := startTerminalLock(t, "lock", "k", "--addr", srv.Addr, "--",
		"sh", "-c", `echo ready; read line; echo "got:$line"`)
	tl.waitScreen("ready")
	tl.typeIn("\x1a")
	tl.waitStderr("CMD was suspended (SIGTSTP), but a command cannot be suspended while it holds the lock: continuing it")
	tl.typeIn("after\n")
	tl.waitScreen("got:after")
	if code := tl.exit(); code != 0 {
		t.Fatalf("exit %d; stderr %q", code, tl.stderr.String())
	}
	if _, _, held := srv.Holder("k"); held {
		t.Fatal("the lock is still held after CMD exited")
	}
}

// TestLockTerminalForegroundComesBack: CMD's group has the foreground
// while it runs, and lock's own group has it again once CMD exited,
// before the release (which hangs here until the server closes).
func TestLockTerminalForegroundComesBack(t *testing.T) {
	srv := clienttest.NewServer(client.SystemClock{})
	defer srv.Close()
	srv.Fail("release", "hang")
	tl := startTerminalLock(t, "lock", "k", "--addr", srv.Addr, "--timeout", "1m", "--",
		"sh", "-c", `echo "pids:$$,$PPID."; read line`)
	cmdPid, lockPid := tl.pids()
	if cmdPid == lockPid || lockPid == 0 {
		t.Fatalf("terminal %q", tl.screen.String())
	}
	// CMD's group is its watchdog's (lock_watchdog.go), not led by CMD.
	group, err := syscall.Getpgid(cmdPid)
	if err != nil || group == lockPid {
		t.Fatalf("CMD %d is in group %d, %v; want a group of its own (lock is %d)", cmdPid, group, err, lockPid)
	}
	if fg := tl.foreground(); fg != group {
		t.Fatalf("foreground group %d while CMD runs, want CMD's %d (lock is %d)", fg, group, lockPid)
	}
	tl.typeIn("\n")
	tl.waitFor("lock's group back in the foreground", func() bool { return tl.foreground() == lockPid })
	srv.Close() // the hung release fails; lock exits with CMD's status
	if code := tl.exit(); code != 0 {
		t.Fatalf("exit %d; stderr %q", code, tl.stderr.String())
	}
}

// TestLockTerminalExecFails: CMD's process takes the foreground before
// exec; when the exec then fails, lock takes it back (from the
// background, without being stopped by SIGTTOU), releases and exits 126.
func TestLockTerminalExecFails(t *testing.T) {
	srv := clienttest.NewServer(client.SystemClock{})
	defer srv.Close()
	bad := filepath.Join(t.TempDir(), "not-a-program")
	if err := os.WriteFile(bad, []byte{0x7f, 'X', 'Y', 'Z', 0, 1, 2, 3}, 0o755); err != nil {
		t.Fatal(err)
	}
	tl := startTerminalLock(t, "lock", "k", "--addr", srv.Addr, "--", bad)
	if code := tl.exit(); code != 126 {
		t.Fatalf("exit %d, want 126; stderr %q", code, tl.stderr.String())
	}
	if !strings.Contains(tl.stderr.String(), "exec format error") {
		t.Errorf("stderr %q", tl.stderr.String())
	}
	if _, _, held := srv.Holder("k"); held {
		t.Fatal("the lock is still held after CMD failed to start")
	}
}

// pids waits for CMD to print "pids:$$,$PPID." and returns CMD's pid and
// lock's (CMD's parent).
func (tl *terminalLock) pids() (cmdPid, lockPid int) {
	tl.t.Helper()
	tl.waitFor("CMD's pids", func() bool {
		scr := tl.screen.String()
		i := strings.Index(scr, "pids:")
		if i < 0 {
			return false
		}
		_, err := fmt.Sscanf(scr[i:], "pids:%d,%d.", &cmdPid, &lockPid)
		return err == nil
	})
	return cmdPid, lockPid
}

// TestLockTerminalForwardsSIGTERM: with CMD in the terminal's foreground,
// a SIGTERM sent to lock itself still reaches CMD, and lock exits with
// CMD's status after releasing.
func TestLockTerminalForwardsSIGTERM(t *testing.T) {
	srv := clienttest.NewServer(client.SystemClock{})
	defer srv.Close()
	tl := startTerminalLock(t, "lock", "k", "--addr", srv.Addr, "--",
		"sh", "-c", `trap 'exit 5' TERM; echo "pids:$$,$PPID."; while :; do sleep 0.05; done`)
	_, lockPid := tl.pids()
	if err := syscall.Kill(lockPid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := tl.exit(); code != 5 {
		t.Fatalf("exit %d, want CMD's 5; stderr %q", code, tl.stderr.String())
	}
	if _, _, held := srv.Holder("k"); held {
		t.Fatal("the lock is still held after CMD exited")
	}
}

// TestLockTerminalStoppedCMD: SIGSTOP of a CMD that has the terminal
// ends the hold there too: lock takes the terminal back, says so, ends
// CMD and exits 4 with the lock released.
func TestLockTerminalStoppedCMD(t *testing.T) {
	srv := clienttest.NewServer(client.SystemClock{})
	defer srv.Close()
	tl := startTerminalLock(t, "lock", "k", "--addr", srv.Addr, "--",
		"sh", "-c", `echo "pids:$$,$PPID."; read line`)
	cmdPid, _ := tl.pids()
	if err := syscall.Kill(cmdPid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if code := tl.exit(); code != exitLost {
		t.Fatalf("exit %d, want %d; stderr %q", code, exitLost, tl.stderr.String())
	}
	if !strings.Contains(tl.stderr.String(), "CMD was stopped by SIGSTOP, and a stopped command must not hold the lock") {
		t.Errorf("stderr %q", tl.stderr.String())
	}
	if _, _, held := srv.Holder("k"); held {
		t.Fatal("the lock is still held after the stopped CMD was ended")
	}
}
