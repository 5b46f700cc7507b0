package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/fencelock/fencelock/api"
)

// waitForever is lock's --wait forever: wait in the queue until granted,
// as etcdctl lock does, or until fencelock is interrupted.
const waitForever = time.Duration(-1)

// waitValue is lock's --wait: a duration under the rule of every duration
// flag (a unit, 0 alone needs none), or "forever".
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

// waitFlag declares lock's --wait.
func waitFlag(f *flags) *time.Duration {
	var d time.Duration
	f.Var((*waitValue)(&d), "wait", fmt.Sprintf("wait in the key's queue up to `D` (at most %s), or forever (0: try once)", fmtDuration(api.MaxWait)))
	return &d
}

// checkWait refuses a --wait past the server's limit in CLI terms.
func checkWait(d time.Duration) error {
	if d == waitForever {
		return nil
	}
	if d < 0 || d > api.MaxWait {
		return usageError("--wait must be between 0s and %s, or forever", fmtDuration(api.MaxWait))
	}
	return nil
}

// waitContext bounds lock's acquire: the call timeout plus the wait, and
// nothing but ctx for a wait without end. The client then waits in rounds
// of the server's longest wait (client.WithWait with a negative bound).
func waitContext(ctx context.Context, cf *clientFlags, wait time.Duration) (context.Context, context.CancelFunc) {
	if wait == waitForever {
		return context.WithCancel(ctx)
	}
	return cf.callContext(ctx, wait)
}
