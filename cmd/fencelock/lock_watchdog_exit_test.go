//go:build unix

package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/client/clienttest"
	"github.com/fencelock/fencelock/clock"
)

// TestLockExits4WhenItsWatchdogStoppedCMD (issue 44): whenever the
// watchdog stopped CMD because no extension reached it by the lease's
// deadline, lock exits 4 ("the lease was lost") and says the watchdog did
// it — whether CMD then died of the SIGTERM or, ignoring it, of the
// SIGKILL. Before, lock passed on CMD's status, 143 or 137, which 'help
// exit-codes' calls CMD's own. The lease here runs on a fake clock nobody
// moves: lock believes it held and never pushes the watchdog, which keeps
// real time, as when lock is starved of CPU between an extension and its
// push.
func TestLockExits4WhenItsWatchdogStoppedCMD(t *testing.T) {
	srv := clienttest.NewServer(client.SystemClock{})
	defer srv.Close()
	for _, tc := range []struct{ name, script string }{
		{"SIGTERM ends CMD", "sleep 30"},
		{"CMD ignores SIGTERM", "trap '' TERM; while :; do sleep 0.05; done"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := client.New([]string{srv.Addr}, client.WithClock(clock.NewFake(time.Now())))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			lease, err := c.TryAcquire(context.Background(), "wd/"+tc.name, client.WithTTL(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			var out, errb syncBuffer
			e := &env{stdout: &out, stderr: &errb, getenv: func(string) string { return "" }}
			asJSON, timeout := false, 5*time.Second
			cf := &clientFlags{json: &asJSON, timeout: &timeout}
			err = runUnderLease(context.Background(), e, cf, lease, []string{"sh", "-c", tc.script})
			var xe *exitError
			if !errors.As(err, &xe) || xe.Code != exitLost {
				t.Fatalf("runUnderLease = %v; want exit %d (stderr %q)", err, exitLost, errb.String())
			}
			if !strings.Contains(err.Error(), "the watchdog stopped CMD") {
				t.Errorf("%q does not say the watchdog stopped CMD", err)
			}
		})
	}
}
