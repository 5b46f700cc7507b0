package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/client/clienttest"
)

// TestLockTakesFlocksHabits (issue 44): what flock's users type works, or
// is refused with the spelling that does. -c 'CMD' runs CMD through
// /bin/sh -c, before KEY or after it (before, `lock KEY -c 'cmd'` ran a
// program named "-c"); -w SECS waits that long (before: an unknown flag);
// -n, which is a semaphore's permits here, refused with a word that names
// --try (before: "invalid value for --n").
func TestLockTakesFlocksHabits(t *testing.T) {
	srv := clienttest.NewServer(client.SystemClock{})
	defer srv.Close()
	envs := map[string]string{"FENCELOCK_ADDR": srv.Addr}
	for _, args := range [][]string{
		{"lock", "jobs/c", "-c", `echo "$FENCELOCK_KEY $FENCELOCK_TOKEN" | tr a-z A-Z; exit 3`},
		{"lock", "-c", `echo "$FENCELOCK_KEY $FENCELOCK_TOKEN" | tr a-z A-Z; exit 3`, "jobs/c"},
		{"lock", "--ttl", "5s", "jobs/c", "-c", `echo "$FENCELOCK_KEY $FENCELOCK_TOKEN" | tr a-z A-Z; exit 3`},
	} {
		code, out, errs := runClientCLI(t, envs, args...)
		if code != 3 || !strings.HasPrefix(out, "JOBS/C ") || errs != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 3 and CMD's output, run by the shell", args, code, out, errs)
		}
	}

	// -w SECS bounds the wait, in seconds as flock counts them.
	c, err := client.New([]string{srv.Addr})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Grant(t.Context(), "jobs/w", "other", time.Minute, 0); err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(t.TempDir(), "started")
	for _, w := range []string{"0.2", "0", "200ms"} {
		code, _, errs := runClientCLI(t, envs, "lock", "-w", w, "jobs/w", "--", "touch", marker)
		if code != exitNo || !strings.Contains(errs, "held by another holder") {
			t.Errorf("lock -w %s on a held key: exit %d, stderr %q; want 1, held", w, code, errs)
		}
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("CMD ran without the lock")
	}
	if len(srv.Waiters("jobs/w")) != 0 {
		t.Error("a waiter was left in the queue")
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"lock", "-n", "jobs/n", "--", "true"}, "for flock's -n (do not wait), use --try"},
		{[]string{"lock", "jobs/n", "-c"}, "-c takes the command, one argument"},
		{[]string{"lock", "jobs/n", "-c", "true", "false"}, "-c takes the command, one argument"},
		{[]string{"lock", "-c", "true", "jobs/n", "--", "false"}, "-c CMD, or -- CMD, not both"},
		{[]string{"lock", "-w", "5", "--wait", "1s", "jobs/n", "--", "true"}, "-w and --wait"},
		{[]string{"lock", "-w", "5", "--try", "jobs/n", "--", "true"}, "-w and --try"},
		{[]string{"lock", "-w", "soon", "jobs/n", "--", "true"}, "seconds"},
	} {
		code, _, errs := runClientCLI(t, envs, tc.args...)
		if code != exitUsage || !strings.Contains(errs, tc.want) {
			t.Errorf("%q: exit %d, stderr %q; want 2 and %q", tc.args, code, errs, tc.want)
		}
	}
	if _, _, held := srv.Holder("jobs/n"); held {
		t.Error("a refused command line took the lock")
	}
	// --n N is still a semaphore's permits.
	if code, out, errs := runClientCLI(t, envs, "lock", "-n", "2", "jobs/sem", "--", "sh", "-c", "echo $FENCELOCK_SLOT"); code != 0 || out != "1\n" {
		t.Errorf("lock -n 2: exit %d, stdout %q, stderr %q; want a permit of a semaphore", code, out, errs)
	}
}
