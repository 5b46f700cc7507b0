package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/client"
)

// exitLost is lock's status when the lease was lost while CMD ran.
const exitLost = 4

const lockUsage = `Usage: fencelock lock KEY [--ttl D] [--try | --wait D] [--holder H] [--n N | --read | --write] -- CMD [ARGS...]
       fencelock lock KEY [FLAGS] --c 'CMD ARGS...'

Acquires KEY (waiting in the key's FIFO queue until it is granted, as
flock does; --wait D bounds the wait, --try tries once), runs CMD with
FENCELOCK_KEY, FENCELOCK_TOKEN and FENCELOCK_HOLDER in its environment,
extends the lease while CMD runs (about every TTL/3, more often below a
TTL of 2.7s; the token stays the same), and releases it when CMD exits.
Pass FENCELOCK_TOKEN to whatever CMD writes to, so that the resource can
refuse a stale writer.

If the lease is lost (no extension confirmed within 0.89×TTL of sending
the last confirmed one, or the server refused one), fencelock says so on
stderr, sends SIGTERM to CMD's process group, and SIGKILL TTL/10 later,
at 0.99×TTL after that send: before the earliest moment the server could
grant KEY to anyone else (TTL after it), with TTL/100 to spare for clocks
that run at different rates. A watchdog process keeps that promise when
fencelock itself cannot (stopped, starved): it holds the two instants,
pushed forward at each confirmed extension, and signals CMD's group
itself when they pass. If fencelock is killed, the watchdog sends SIGTERM
at once. Only a frozen machine is beyond it: that is what the token is for.

CMD runs in its own process group, so the whole tree it starts is
signalled; SIGINT, SIGTERM and SIGHUP sent to fencelock are forwarded to
that group, and the lock is released after CMD exits. When CMD's first
process exits, whatever it left running in its group is killed (SIGKILL)
before the lock is released or the loss reported: nothing started under
the lock outlives it. Without "--", flags must come before KEY and
everything after KEY is CMD.

flock's habits work, each flag with one dash or two: --c 'CMD' runs CMD
through /bin/sh (before KEY, or as KEY --c 'CMD'), and --w SECS waits at
most SECS seconds. flock's no-wait option is --try here: --n N is a
semaphore's permits.

CMD inherits fencelock's stdin, stdout and stderr as they are. When one
of them is fencelock's terminal and fencelock runs in its foreground,
CMD's group gets the terminal's foreground, as a shell gives it to a job:
CMD can read the terminal (an editor, a prompt), Ctrl-C goes to CMD (the
lock is released when CMD exits), and fencelock takes the terminal back
when CMD exits. Otherwise (no terminal, or fencelock in the background)
CMD reads stdin as it is (a pipe, a file), and a CMD that reads the
terminal is stopped by SIGTTIN.

A stopped CMD must not hold the lock. Ctrl-Z (SIGTSTP) is undone:
fencelock says so and continues CMD. Any other stop (SIGSTOP, SIGTTIN,
SIGTTOU) ends the hold as a loss does: SIGTERM and SIGCONT, SIGKILL when
the grace period ends, release, exit status 4. (Stops are seen on Linux
only.) See 'fencelock help safe-stop'.

A wait keeps its place in the queue however long it lasts, and through
a leader's failover. Ctrl-C (SIGINT) or SIGTERM while waiting leaves the
queue, holds nothing, and exits 130 or 143; CMD never starts.
` + sharedUsage

const lockExit = `Exit status:
  CMD's own status when it ran and the lease held (128+N if killed by signal N)
  1    the lock could not be had within --wait, or at once with --try
       (CMD never started)
  2    bad usage, or a client set up wrong (--addr, TLS)
  3    the server cannot be reached (CMD never started)
  7, 8 refused by the ACLs, or over a quota (CMD never started)
  130, 143  interrupted by SIGINT or SIGTERM while waiting (CMD never started)
  4    the lease was lost while CMD ran, CMD was stopped by SIGSTOP,
       SIGTTIN or SIGTTOU, or the watchdog ended CMD (no extension
       reached it in time); CMD was ended
  126  CMD could not be started (or lock does not run on this platform:
       it needs unix process groups); 127 CMD was not found
`

func runLock(ctx context.Context, e *env, args []string) error {
	f, cf := newClientFlags(e, "lock", lockUsage)
	f.after = lockExit
	holder := holderFlag(f, "holder `NAME`; default: hostname-pid-random")
	ttl := f.Duration("ttl", client.DefaultTTL, "lease TTL, 100ms to 24h")
	waits := addWaitFlags(f)
	var flockW flockWait
	f.Var(&flockW, "w", "wait at most `SECS` seconds (5, 0.5), as flock does: --wait in flock's units")
	shell := f.String("c", "", "run `CMD` through /bin/sh, as flock does; also after KEY: lock KEY --c 'CMD'")
	lockDelay := f.Duration("lock-delay", 0, "grant KEY to nobody for D after the lease expires (not after a release), at most 60s")
	shared := addSharedFlags(f)
	cf.common(f, "write the granted lease, and a loss, as JSON lines on stderr (stdout belongs to CMD)")

	var pos, argv []string
	dash := slices.Index(args, "--")
	if dash >= 0 {
		var err error
		if pos, err = f.parse(args[:dash]); err != nil {
			return err
		}
		argv = args[dash+1:]
	} else {
		f.stopAtArg = true
		all, err := f.parse(args)
		if err != nil {
			return err
		}
		if len(all) > 0 {
			pos, argv = all[:1], all[1:]
		}
	}
	// flock's spelling, lock KEY -c 'CMD': without "--", everything
	// after KEY is CMD, and a program named "-c" is surely not meant.
	byShell := f.given("c")
	if dash < 0 && len(argv) > 0 && (argv[0] == "-c" || argv[0] == "--c") {
		if len(argv) != 2 {
			return usageError("-c takes the command, one argument: lock KEY -c 'CMD ARGS...'")
		}
		*shell, argv, byShell = argv[1], nil, true
	}
	if byShell {
		if len(argv) > 0 {
			return usageError("-c CMD, or -- CMD, not both")
		}
		argv = []string{"/bin/sh", "-c", *shell}
	}
	if len(pos) != 1 || len(argv) == 0 {
		return usageError("want KEY -- CMD [ARGS...] (or KEY -c 'CMD')")
	}
	if err := checkDuration("ttl_ms", *ttl); err != nil {
		return err
	}
	wait, err := waits.value()
	if err != nil {
		return err
	}
	if flockW.set {
		switch {
		case f.given("wait"):
			return usageError("-w and --wait: give one")
		case *waits.try:
			return usageError("-w and --try: give one")
		}
		wait = flockW.d
	}
	if err := checkDuration("lock_delay_ms", *lockDelay); err != nil {
		return err
	}
	sharedOpts, err := shared.options()
	if err != nil {
		return err
	}
	if err := lockSupported(); err != nil {
		return err
	}
	key := pos[0]
	c, err := cf.client()
	if err != nil {
		return err
	}
	defer c.Close()

	lease, err := acquireForLock(ctx, c, cf, key, *holder, *ttl, wait, append(sharedOpts, client.WithLockDelay(*lockDelay))...)
	if err != nil {
		return clientFail("lock "+key, err)
	}
	if in, ok := context.Cause(ctx).(*interrupted); ok {
		// Granted as the signal came: never start CMD for a caller that
		// asked to stop.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), *cf.timeout)
		defer cancel()
		_ = lease.Release(rctx)
		return clientFail("lock "+key, in)
	}
	if *cf.json {
		if err := writeJSON(e.stderr, apiLease(lease.Lock())); err != nil {
			_ = lease.Release(context.WithoutCancel(ctx))
			return err
		}
	}
	return runUnderLease(ctx, e, cf, lease, argv)
}

func acquireForLock(ctx context.Context, c *client.Client, cf *clientFlags, key, holder string, ttl, wait time.Duration, more ...client.LeaseOption) (*client.Lease, error) {
	actx, cancel := cf.callContext(ctx, wait)
	defer cancel()
	opts := append([]client.LeaseOption{client.WithTTL(ttl)}, more...)
	if holder != "" {
		// Left unset, the client picks a holder of its own and can safely
		// release a grant that crossed a cancelled wait on the wire.
		opts = append(opts, client.WithHolder(holder))
	}
	if wait != 0 { // < 0: waitForever, until actx ends
		return c.Acquire(actx, key, append(opts, client.WithWait(wait))...)
	}
	return c.TryAcquire(actx, key, opts...)
}

// runUnderLease runs argv while lease is held and decides lock's status.
func runUnderLease(ctx context.Context, e *env, cf *clientFlags, lease *client.Lease, argv []string) error {
	key := lease.Key()
	release := func() error {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), *cf.timeout)
		defer cancel()
		return lease.Release(rctx)
	}

	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = e.stdin, e.stdout, e.stderr
	cmd.Env = append(os.Environ(),
		"FENCELOCK_KEY="+key,
		"FENCELOCK_TOKEN="+strconv.FormatUint(lease.Token(), 10),
		"FENCELOCK_HOLDER="+lease.Holder(),
	)
	cmd.Env = append(cmd.Env, sharedEnv(lease.Lock())...)
	cmd.WaitDelay = time.Second // do not hang on pipes kept open by orphans

	// Catch signals before the child exists, so none is lost in between.
	sigc := make(chan os.Signal, 4)
	signal.Notify(sigc, forwardedSignals...)
	defer signal.Stop(sigc)

	// Subscribed before the deadlines are read, so that no confirmation
	// between the two goes unpushed.
	extc := lease.Extended()
	// The lease may already be gone (a slow start, a pause): never start
	// CMD without it.
	if err := lease.Err(); err != nil {
		_ = release()
		return &exitError{Code: exitLost, Err: fmt.Errorf("lock %s: %s before CMD started", key, trimPrefix(err))}
	}
	// The watchdog stops CMD even when this process cannot (lock_watchdog.go).
	wd, err := startWatchdog(e, cf, lease)
	if err != nil {
		_ = release()
		return &exitError{Code: 126, Err: fmt.Errorf("lock %s: CMD not started: %v", key, err)}
	}
	// CMD joins the watchdog's process group: a loss must stop the whole
	// tree CMD started, not just its first process (a shell's children
	// would outlive it). With lock's terminal, the group gets its
	// foreground.
	pgid := wd.pgid()
	job := newJob(cmd, e, pgid)
	defer job.finish()
	if err := cmd.Start(); err != nil {
		wd.quit()
		_ = release()
		code := 126
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			code = 127
		}
		return &exitError{Code: code, Err: fmt.Errorf("lock %s: %v", key, err)}
	}
	// Reaped last: until then the watchdog's pid names the group.
	defer wd.close()
	sendGroup := func(s os.Signal) {
		if s == sigKill {
			wd.groupKilled = true
		}
		signalGroup(pgid, s)
	}
	stopc := job.started(cmd.Process.Pid)

	waitc := make(chan error, 1)
	go func() { waitc <- cmd.Wait() }()

	lostc := lease.Done()
	wdGone := wd.gone
	var killc <-chan time.Time
	var killAt time.Time
	// killIn sends SIGKILL after grace, or sooner if already due.
	killIn := func(grace time.Duration) {
		if grace <= 0 {
			sendGroup(sigKill)
		} else if at := time.Now().Add(grace); killc == nil || at.Before(killAt) {
			killc, killAt = time.After(grace), at
		}
	}
	var lost, ended error
	for {
		select {
		case <-waitc:
			// CMD's first process is gone, but what it started may not be
			// (a worker that ignores SIGTERM, a background job): nothing of
			// CMD may run past the point where the lock is released or
			// lost, so kill whatever is left in its process group first.
			sendGroup(sigKill)
			job.takeBack() // before a release that may take a while
			if lost == nil {
				// A loss not yet noticed (e.g. we were paused) still counts:
				// CMD may have run without the lock.
				if err := lease.Err(); err != nil && !errors.Is(err, client.ErrReleased) {
					lost = err
				}
			}
			// The watchdog, a member of the group, has been sent SIGKILL
			// too; once it is gone, all it said has been read. If it
			// signalled CMD itself, no extension reached it in time:
			// CMD's status is not CMD's own (143, 137), and the hold
			// ended as a loss does.
			wd.settle()
			if lost == nil && ended == nil && wd.stoppedCMD() {
				ended = errors.New("the watchdog stopped CMD: no extension reached it by the lease's deadline")
			}
			if lost != nil {
				_ = release() // harmless with our token; frees the key sooner if the server still has it
				return &exitError{Code: exitLost, Err: fmt.Errorf("lock %s: %s; CMD %s", key, trimPrefix(lost), describeExit(cmd.ProcessState))}
			}
			if ended != nil {
				_ = release()
				return &exitError{Code: exitLost, Err: fmt.Errorf("lock %s: %v; CMD %s", key, ended, describeExit(cmd.ProcessState))}
			}
			if err := release(); err != nil {
				if *cf.json {
					_ = writeJSON(e.stderr, lockEvent{Key: key, Token: lease.Token(), Event: "release_failed", Error: trimPrefix(err)})
				} else {
					fmt.Fprintf(e.stderr, "fencelock: lock %s: release: %s (the lease expires by itself within %v)\n", key, trimPrefix(err), lease.TTL())
				}
			}
			if code := statusOf(cmd.ProcessState); code != 0 {
				return &exitError{Code: code}
			}
			return nil
		case s := <-sigc:
			sendGroup(s)
		case <-extc:
			extc = lease.Extended()
			wd.arm(lease.Deadline(), lease.StopBy(), lease.TTL())
		case <-wdGone:
			wdGone = nil
			if wd.unexpected() && ended == nil && lost == nil {
				// Killed by someone: a freeze of lock's would no longer
				// stop CMD, so the hold ends here.
				ended = fmt.Errorf("the watchdog (pid %d) ended, and CMD must not run without it", pgid)
				grace := max(time.Until(lease.StopBy()), 0)
				if *cf.json {
					kill := api.Ms(grace)
					_ = writeJSON(e.stderr, lockEvent{Key: key, Token: lease.Token(), Event: "watchdog_ended", Error: ended.Error(), SIGKILLInMs: &kill})
				} else {
					fmt.Fprintf(e.stderr, "fencelock: lock %s: %v; sending SIGTERM to CMD, SIGKILL in %v, then releasing\n", key, ended, grace.Round(time.Millisecond))
				}
				sendGroup(sigTerm)
				sendGroup(sigCont)
				killIn(grace)
			}
		case <-lostc:
			lostc = nil
			lost = lease.Err()
			grace := time.Until(lease.StopBy())
			if *cf.json {
				kill := api.Ms(max(grace, 0))
				_ = writeJSON(e.stderr, lockEvent{Key: key, Token: lease.Token(), Event: "lost", Error: trimPrefix(lost), SIGKILLInMs: &kill})
			} else {
				fmt.Fprintf(e.stderr, "fencelock: lock %s: %s; sending SIGTERM to CMD, SIGKILL in %v\n", key, trimPrefix(lost), max(grace, 0).Round(time.Millisecond))
			}
			wd.end(lease.StopBy())
			sendGroup(sigTerm)
			killIn(grace)
		case sig := <-stopc:
			if grace, err := job.stopped(e, cf, lease, sig, sendGroup); err != nil && ended == nil {
				ended = err
				wd.end(lease.StopBy())
				killIn(grace)
			}
		case <-killc:
			killc = nil
			sendGroup(sigKill)
		}
	}
}

// lockEvent is what lock --json says on stderr besides the grant (one
// JSON line each): the lease was lost while CMD ran (and when SIGKILL
// follows the SIGTERM), or releasing it after CMD failed. The final error
// is main's one text line, as for every command.
type lockEvent struct {
	Key   string `json:"key"`
	Token uint64 `json:"token"`
	// lost, release_failed, stopped, continued; watchdog (from the
	// watchdog process: it signalled CMD itself), watchdog_ended (it was
	// killed: the hold ends).
	Event       string `json:"event"`
	Error       string `json:"error"`
	SIGKILLInMs *int64 `json:"sigkill_in_ms,omitempty"`
}
