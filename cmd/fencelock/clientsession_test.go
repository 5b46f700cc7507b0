package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestClientSessionAgainstServer drives the CLI client commands, as
// processes, against a real `fencelock server`, checking stdout and exit
// statuses the way a shell script would see them.
func TestClientSessionAgainstServer(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	addr := freeAddr(t)
	startProc(t, dir, nil, "--listen", addr, "--data", filepath.Join(dir, "data")).waitReady(addr)

	cli := func(args ...string) (int, string, string) {
		cmd := exec.Command(fencelockBinary(t), args...)
		cmd.Env = append(cmd.Environ(), "FENCELOCK_ADDR="+addr)
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code := 0
		if xe, ok := err.(*exec.ExitError); ok {
			code = xe.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return code, out.String(), errb.String()
	}
	steps := []struct {
		args   []string
		code   int
		stdout string // prefix
	}{
		{[]string{"acquire", "jobs/nightly", "--holder", "alice", "--ttl", "30s"}, 0, "1\n"},
		{[]string{"acquire", "jobs/nightly", "--holder", "bob", "--ttl", "30s", "--try"}, 1, ""},
		{[]string{"acquire", "jobs/nightly", "--holder", "bob", "--wait", "200ms"}, 1, ""},
		{[]string{"check", "jobs/nightly", "1"}, 0, "true\n"},
		{[]string{"extend", "jobs/nightly", "1", "--holder", "alice", "--ttl", "1m"}, 0, "1\n"},
		{[]string{"extend", "jobs/nightly", "1", "--holder", "bob", "--ttl", "1m"}, 1, ""},
		{[]string{"get", "--json", "jobs/nightly"}, 0, `{"key":"jobs/nightly","holder":"alice","token":1,"ttl_ms":60000,`},
		{[]string{"list", "jobs/"}, 0, "KEY           HOLDER  TOKEN  TTL   REMAINING\njobs/nightly  alice   1      1m0s"},
		{[]string{"release", "jobs/nightly", "--holder", "bob"}, 1, ""},
		{[]string{"release", "jobs/nightly", "--holder", "alice"}, 0, ""},
		{[]string{"check", "jobs/nightly", "1"}, 1, "false\n"},
		{[]string{"get", "jobs/nightly"}, 1, ""},
		{[]string{"acquire", "jobs/nightly", "--holder", "bob", "--ttl", "50ms"}, 2, ""},
		{[]string{"lock", "jobs/nightly", "--ttl", "2s", "--", "sh", "-c", `echo "$FENCELOCK_TOKEN"; exit 3`}, 3, "2\n"},
		{[]string{"get", "jobs/nightly", "--addr", freeAddr(t), "--timeout", "3s"}, 3, ""},
	}
	for _, s := range steps {
		code, out, errs := cli(s.args...)
		if code != s.code || !strings.HasPrefix(out, s.stdout) {
			t.Fatalf("fencelock %s: exit %d, stdout %q, stderr %q; want %d and %q", strings.Join(s.args, " "), code, out, errs, s.code, s.stdout)
		}
		// One line; bad usage adds a hint under it.
		if lines := strings.Count(errs, "\n"); code != 0 && code != 3 && lines > 1 && (code != exitUsage || lines > 2) {
			t.Errorf("fencelock %s: stderr is not one line (and a hint): %q", strings.Join(s.args, " "), errs)
		}
	}
}
