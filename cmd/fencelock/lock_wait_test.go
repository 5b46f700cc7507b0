package main

import (
	"context"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/client/clienttest"
)

// TestLockWaitsByDefault (issue 27 item 2): lock on a held key waits in
// the queue, as flock does, with no flag (or --wait forever), however long
// that is (here: until the test releases the key, once the waiter is in the
// queue), and then runs CMD.
func TestLockWaitsByDefault(t *testing.T) {
	for _, flags := range [][]string{nil, {"--wait", "forever"}} {
		t.Run(strings.Join(append([]string{"lock"}, flags...), " "), func(t *testing.T) {
			srv := clienttest.NewServer(client.SystemClock{})
			defer srv.Close()
			c, err := client.New([]string{srv.Addr})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			other, err := c.Grant(t.Context(), "k", "other", time.Hour, 0)
			if err != nil {
				t.Fatal(err)
			}
			type result struct {
				code      int
				out, errs string
			}
			resc := make(chan result, 1)
			go func() {
				args := append(append([]string{"lock", "k"}, flags...), "--", "sh", "-c", `echo "token $FENCELOCK_TOKEN"`)
				code, out, errs := runClientCLI(t, map[string]string{"FENCELOCK_ADDR": srv.Addr}, args...)
				resc <- result{code, out, errs}
			}()
			for deadline := time.Now().Add(20 * time.Second); len(srv.Waiters("k")) == 0; time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("lock never queued")
				}
			}
			select {
			case r := <-resc:
				t.Fatalf("lock ended while the key was held: %+v", r)
			default:
			}
			if _, err := c.Release(t.Context(), "k", "other", other.Token); err != nil {
				t.Fatal(err)
			}
			r := <-resc
			if r.code != 0 || r.out != "token 2\n" || r.errs != "" {
				t.Fatalf("exit %d, stdout %q, stderr %q; want 0 and token 2", r.code, r.out, r.errs)
			}
		})
	}
}

// TestInterruptedWaitLeavesTheQueue (issue 27 item 2): SIGINT or SIGTERM
// while lock or acquire waits (main cancels the command's context with
// the signal as the cause) leaves the queue, holds nothing and exits 130
// or 143, never 1, the status of "held". In-process; the process test
// with a real SIGINT is TestLockCtrlCWhileWaiting.
func TestInterruptedWaitLeavesTheQueue(t *testing.T) {
	srv := clienttest.NewServer(client.SystemClock{})
	defer srv.Close()
	c, err := client.New([]string{srv.Addr})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Grant(t.Context(), "k", "other", time.Hour, 0); err != nil {
		t.Fatal(err)
	}
	envs := map[string]string{"FENCELOCK_ADDR": srv.Addr}
	for _, tc := range []struct {
		sig  os.Signal
		args []string
		code int
	}{
		{os.Interrupt, []string{"lock", "k", "--", "echo", "never"}, 130},
		{syscall.SIGTERM, []string{"lock", "k", "--holder", "me", "--", "echo", "never"}, 143},
		{os.Interrupt, []string{"acquire", "k", "--holder", "me"}, 130},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			ctx, cancel := context.WithCancelCause(t.Context())
			var out, errb syncBuffer
			e := &env{stdin: strings.NewReader(""), stdout: &out, stderr: &errb, getenv: func(k string) string { return envs[k] }}
			codec := make(chan int, 1)
			go func() { codec <- exitCode(e, run(ctx, e, tc.args)) }()
			for deadline := time.Now().Add(20 * time.Second); len(srv.Waiters("k")) == 0; time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("never queued")
				}
			}
			cancel(&interrupted{sig: tc.sig})
			code := <-codec
			if code != tc.code || out.String() != "" || !strings.Contains(errb.String(), "interrupted by "+signalName(tc.sig)) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want %d and interrupted", code, out.String(), errb.String(), tc.code)
			}
			for deadline := time.Now().Add(20 * time.Second); len(srv.Waiters("k")) != 0; time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("waiters left on the server: %v", srv.Waiters("k"))
				}
			}
			if h, _, _ := srv.Holder("k"); h != "other" {
				t.Fatalf("k is held by %q; want other still", h)
			}
		})
	}
}

// TestLockWaitFlag: --wait takes a duration with its unit or forever (a
// wait longer than the server's hour is sent in rounds); a bare number, a
// negative one and --try with a wait are refused.
func TestLockWaitFlag(t *testing.T) {
	envs := map[string]string{"FENCELOCK_ADDR": deadLoopback(t)}
	for _, tc := range []struct {
		wait, err string
	}{
		{"5", `invalid value "5" for --wait: a duration needs a unit (5s or 5ms, say), or forever`},
		{"-1s", `invalid value "-1s" for --wait: must not be negative`},
		{"always", `invalid value "always" for --wait: not a duration like 250ms, 30s or 1m30s, or forever`},
	} {
		code, _, errs := runClientCLI(t, envs, "lock", "k", "--wait", tc.wait, "--", "true")
		if code != exitUsage || !strings.Contains(errs, tc.err) {
			t.Errorf("--wait %s: exit %d, stderr %q; want 2 and %q", tc.wait, code, errs, tc.err)
		}
	}
	if code, _, errs := runClientCLI(t, envs, "lock", "k", "--try", "--wait", "1s", "--", "true"); code != exitUsage || !strings.Contains(errs, "--try and --wait 1s: --try tries once") {
		t.Errorf("--try --wait 1s: exit %d, stderr %q; want 2", code, errs)
	}
	var v waitValue
	for in, want := range map[string]string{"forever": "forever", "0": "0s", "90s": "1m30s"} {
		if err := v.Set(in); err != nil || v.String() != want {
			t.Errorf("Set(%q): %v, String %q; want %q", in, err, v.String(), want)
		}
	}
}
