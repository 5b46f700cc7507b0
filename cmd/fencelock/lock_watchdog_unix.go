//go:build unix

package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/clock"
)

// runLockWatchdog is the watchdog process (see lock_watchdog.go).
func runLockWatchdog(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, watchdogCommand, watchdogUsage)
	key := f.String("key", "", "the locked key, for its reports")
	token := f.Uint64("token", 0, "the lease's token, for its reports")
	parent := f.Int("parent", 0, "lock's pid, for its reports")
	term := f.Int64("term", 0, "send SIGTERM at this CLOCK_MONOTONIC instant (ns) unless pushed")
	kill := f.Int64("kill", 0, "send SIGKILL at this CLOCK_MONOTONIC instant (ns) unless pushed")
	asJSON := f.Bool("json", false, "report as JSON lines")
	if _, err := f.parse(args); err != nil {
		return err
	}
	// Before "ready": lock starts CMD, and forwards signals to the group,
	// only after it.
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT,
		syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU, syscall.SIGPIPE)
	out := bufio.NewWriter(e.stdout)
	tell := func(s string) {
		_, _ = out.WriteString(s + "\n")
		_ = out.Flush()
	}
	group := syscall.Getpgrp()
	w := &watchdog{
		clk: monoClock{},
		signal: func(s os.Signal) bool {
			return syscall.Kill(-group, s.(syscall.Signal)) == nil
		},
		tell:   tell,
		report: watchdogReporter(e.stderr, *key, *token, *asJSON),
		parent: *parent,
		termAt: time.Unix(0, *term),
		killAt: time.Unix(0, *kill),
	}
	if group != os.Getpid() {
		return &exitError{Code: 126, Err: errors.New("lock-watchdog: must lead its own process group (it is started by fencelock lock)")}
	}
	tell("ready")
	return w.run(e.stdin)
}

// monoClock is CLOCK_MONOTONIC, which every process on the machine
// shares (Go's monotonic readings are relative to each process's start,
// so lock and the watchdog could not compare them). Its times carry no
// monotonic reading of Go's: they are compared by their nanoseconds.
type monoClock struct{}

func (monoClock) Now() time.Time { return time.Unix(0, monoNow()) }

func (monoClock) AfterFunc(d time.Duration, f func()) clock.Timer { return time.AfterFunc(d, f) }

func monoNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		// Never on the systems lock runs on. Zero makes every deadline
		// look passed: the watchdog stops CMD rather than wait blind.
		return 0
	}
	return ts.Nano()
}

// monoOf is t (a reading of this process's clock) on CLOCK_MONOTONIC. The
// CLOCK_MONOTONIC reading is taken first, so it stands for an instant no
// later than now: the result is never later than the truth, and a
// deadline handed to the watchdog can only come early.
func monoOf(t time.Time) int64 {
	mono := monoNow()
	return mono + int64(time.Until(t))
}

// selfExe is this binary, to run as the watchdog. On Linux it is
// /proc/self/exe, the very file this process runs even if a new version
// has been installed at its path since: the watchdog must speak the same
// protocol.
func selfExe() (string, error) {
	if runtime.GOOS == "linux" {
		if _, err := os.Stat("/proc/self/exe"); err == nil {
			return "/proc/self/exe", nil
		}
	}
	return os.Executable()
}

// lockWatchdog is lock's end of its watchdog process.
type lockWatchdog struct {
	cmd  *exec.Cmd
	in   *os.File      // the watchdog's stdin: pushes
	gone chan struct{} // closed when the watchdog's stdout ends: it exited
	// fired is set when the watchdog said it sends SIGKILL, which ends it
	// with the group: its end is then no surprise.
	fired atomic.Bool
	// termed is set when the watchdog said it sends SIGTERM.
	termed atomic.Bool
	// groupKilled is set when lock sends the group SIGKILL itself.
	groupKilled bool
}

// startWatchdog starts the watchdog for lease, leading a new process
// group, and waits until it is ready: CMD can then join its group.
func startWatchdog(e *env, cf *clientFlags, lease *client.Lease) (*lockWatchdog, error) {
	exe, err := selfExe()
	if err != nil {
		return nil, err
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, err
	}
	args := []string{watchdogCommand,
		"--key", lease.Key(), "--token", strconv.FormatUint(lease.Token(), 10),
		"--parent", strconv.Itoa(os.Getpid()),
		"--term", strconv.FormatInt(monoOf(watchdogTerm(lease.Deadline(), lease.TTL())), 10),
		"--kill", strconv.FormatInt(monoOf(lease.StopBy()), 10)}
	if *cf.json {
		args = append(args, "--json")
	}
	cmd := exec.Command(exe, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, e.stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return nil, err
	}
	w := &lockWatchdog{cmd: cmd, in: inW, gone: make(chan struct{})}
	ready := make(chan error, 1)
	go func() {
		defer close(w.gone)
		defer outR.Close()
		sc := bufio.NewScanner(outR)
		first := true
		for sc.Scan() {
			switch line := sc.Text(); {
			case first && line == "ready":
				ready <- nil
			case first:
				ready <- fmt.Errorf("it said %q", line)
			case line == "term":
				w.termed.Store(true)
			case line == "kill":
				w.fired.Store(true)
			}
			first = false
		}
		if first {
			ready <- errors.New("it exited before it was ready")
		}
	}()
	if err := <-ready; err != nil {
		_ = cmd.Process.Kill()
		w.close()
		return nil, fmt.Errorf("the watchdog (%s %s): %v", exe, watchdogCommand, err)
	}
	return w, nil
}

// pgid is the group CMD runs in: the watchdog's.
func (w *lockWatchdog) pgid() int { return w.cmd.Process.Pid }

// send writes one line, giving up after a while rather than block lock:
// a line is far shorter than PIPE_BUF, so it is written whole or not at
// all, and the next push carries newer deadlines anyway.
func (w *lockWatchdog) send(line string) {
	_ = w.in.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
	_, _ = w.in.WriteString(line + "\n")
}

// arm pushes the lease's deadlines: SIGTERM a moment after deadline,
// SIGKILL at stopBy.
func (w *lockWatchdog) arm(deadline, stopBy time.Time, ttl time.Duration) {
	w.send(fmt.Sprintf("arm %d %d", monoOf(watchdogTerm(deadline, ttl)), monoOf(stopBy)))
}

// watchdogTerm is when the watchdog sends SIGTERM: a tenth of the stop
// grace after the lease's deadline, so that a lock that runs, and sends
// SIGTERM itself at the deadline, has told the watchdog so first. Only
// the SIGKILL's time is a matter of safety, and that one is not moved.
func watchdogTerm(deadline time.Time, ttl time.Duration) time.Time {
	return deadline.Add(client.StopGrace(ttl) / 10)
}

// end tells the watchdog that lock is ending CMD itself, with SIGKILL due
// at kill at the latest.
func (w *lockWatchdog) end(kill time.Time) { w.send(fmt.Sprintf("end %d", monoOf(kill))) }

// unexpected says whether the watchdog's end (gone closed) was neither
// its own SIGKILL nor lock's.
func (w *lockWatchdog) unexpected() bool { return !w.fired.Load() && !w.groupKilled }

// stoppedCMD says whether the watchdog signalled CMD's group itself
// (SIGTERM or SIGKILL): whatever status CMD then ended with, it was
// stopped because no extension reached the watchdog in time. Call it
// after settle, once CMD has exited.
func (w *lockWatchdog) stoppedCMD() bool { return w.termed.Load() || w.fired.Load() }

// settle waits for the watchdog's end once its group has been sent
// SIGKILL (it is a member), so that every word it said before it died has
// been read. The watchdog says what it sends before it sends it, so a CMD
// ended by its signal is always known to have been. The wait is bounded:
// a watchdog that outlived the group's SIGKILL would say nothing more.
func (w *lockWatchdog) settle() {
	select {
	case <-w.gone:
	case <-time.After(2 * time.Second):
	}
}

// quit ends a watchdog whose CMD never started.
func (w *lockWatchdog) quit() {
	w.send("quit")
	select {
	case <-w.gone:
	case <-time.After(2 * time.Second):
		_ = w.cmd.Process.Kill()
	}
	w.close()
}

// close reaps the watchdog: only once nothing will signal its group again.
func (w *lockWatchdog) close() {
	w.in.Close()
	_ = w.cmd.Wait()
}
