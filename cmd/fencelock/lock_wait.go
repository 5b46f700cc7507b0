package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/fencelock/fencelock/api"
)

// lock and acquire wait as flock, etcdctl lock and consul lock do: in the
// key's FIFO queue until the lock is granted, however long that takes,
// keeping their place (the client sends the server's hour-long waits in
// overlapping rounds under one request id). --wait D bounds the wait;
// --try, or --wait 0, tries once. SIGINT or SIGTERM during the wait leaves
// the queue and exits 130 or 143 (interrupted, in main.go).

// waitForever is the default wait, and --wait forever: until granted, or
// until fencelock is interrupted.
const waitForever = time.Duration(-1)

// waitValue is --wait: a duration under the rule of every duration flag
// (a unit, 0 alone needs none), or "forever".
type waitValue time.Duration

func (w *waitValue) Set(s string) error {
	if strings.TrimSpace(s) == "forever" {
		*w = waitValue(waitForever)
		return nil
	}
	d, err := parseDuration(s)
	if err != nil {
		return fmt.Errorf("%v, or forever", err)
	}
	if d < 0 {
		return fmt.Errorf("must not be negative")
	}
	*w = waitValue(d)
	return nil
}

func (w *waitValue) String() string {
	if time.Duration(*w) == waitForever {
		return "forever"
	}
	return time.Duration(*w).String()
}

// waitFlags are --wait and --try.
type waitFlags struct {
	f    *flags
	wait time.Duration
	try  *bool
}

// addWaitFlags declares --wait and --try.
func addWaitFlags(f *flags) *waitFlags {
	w := &waitFlags{f: f, wait: waitForever}
	f.Var((*waitValue)(&w.wait), "wait", "wait in the key's queue at most `D`, or forever (0: try once, as --try)")
	w.try = f.Bool("try", false, "try once: fail at once (exit 1) when another holder has the key")
	return w
}

// value is the wait asked for: waitForever, 0 to try once, or a bound.
func (w *waitFlags) value() (time.Duration, error) {
	if *w.try {
		if w.f.given("wait") && w.wait != 0 {
			return 0, usageError("--try and --wait %s: --try tries once", (*waitValue)(&w.wait))
		}
		return 0, nil
	}
	return w.wait, nil
}

// flockWait is lock's -w SECS, flock's spelling of --wait: seconds, as
// flock counts them ("5", "0.5"), where every duration flag of ours wants
// a unit; one given with a unit ("500ms") is read as that. There is no
// doubt to guard against here, unlike --ttl 30000: flock's -w has only
// ever meant seconds.
type flockWait struct {
	d   time.Duration
	set bool
}

func (w *flockWait) Set(s string) error {
	s = strings.TrimSpace(s)
	if secs, err := strconv.ParseFloat(s, 64); err == nil {
		if secs < 0 || secs > api.MaxWait.Seconds()*1e6 {
			return fmt.Errorf("want seconds, at least 0")
		}
		w.d, w.set = time.Duration(secs*float64(time.Second)), true
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return fmt.Errorf("want seconds (5, 0.5) or a duration (500ms)")
	}
	w.d, w.set = d, true
	return nil
}

func (w *flockWait) String() string {
	if w == nil || !w.set {
		return ""
	}
	return strconv.FormatFloat(w.d.Seconds(), 'f', -1, 64)
}
