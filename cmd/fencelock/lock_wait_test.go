package main

import (
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/client/clienttest"
)

// TestLockWaitForever: --wait forever queues until the holder releases,
// however long that is (here: until the test releases it, once the waiter
// is in the queue).
func TestLockWaitForever(t *testing.T) {
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
		code, out, errs := runClientCLI(t, map[string]string{"FENCELOCK_ADDR": srv.Addr}, "lock", "k", "--wait", "forever", "--", "sh", "-c", `echo "token $FENCELOCK_TOKEN"`)
		resc <- result{code, out, errs}
	}()
	for deadline := time.Now().Add(20 * time.Second); len(srv.Waiters("k")) == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("lock --wait forever never queued")
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
}

// TestLockWaitFlag: --wait takes a duration with its unit or forever;
// a bare number and anything past the server's hour are refused.
func TestLockWaitFlag(t *testing.T) {
	envs := map[string]string{"FENCELOCK_ADDR": deadLoopback(t)}
	for _, tc := range []struct {
		wait, err string
	}{
		{"5", `invalid value "5" for --wait: a duration needs a unit (5s or 5ms, say), or forever`},
		{"2h", "lock: --wait must be between 0s and 1h, or forever"},
		{"-1s", `invalid value "-1s" for --wait: must not be negative`},
		{"always", `invalid value "always" for --wait: not a duration like 250ms, 30s or 1m30s, or forever`},
	} {
		code, _, errs := runClientCLI(t, envs, "lock", "k", "--wait", tc.wait, "--", "true")
		if code != exitUsage || !strings.Contains(errs, tc.err) {
			t.Errorf("--wait %s: exit %d, stderr %q; want 2 and %q", tc.wait, code, errs, tc.err)
		}
	}
	var v waitValue
	for in, want := range map[string]string{"forever": "forever", "0": "0s", "90s": "1m30s"} {
		if err := v.Set(in); err != nil || v.String() != want {
			t.Errorf("Set(%q): %v, String %q; want %q", in, err, v.String(), want)
		}
	}
}
