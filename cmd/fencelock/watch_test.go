package main

import (
	"strings"
	"testing"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/client/clienttest"
)

func TestWatchCommand(t *testing.T) {
	srv := clienttest.NewServer(client.SystemClock{})
	defer srv.Close()
	envs := map[string]string{"FENCELOCK_ADDR": srv.Addr}
	for _, args := range [][]string{
		{"acquire", "jobs/a", "--holder", "alice", "--ttl", "30s"},
		{"acquire", "other/x", "--holder", "bob", "--ttl", "30s"},
		{"release", "jobs/a", "--holder", "alice"},
	} {
		if code, _, stderr := runClientCLI(t, envs, args...); code != 0 {
			t.Fatalf("%v: %d %s", args, code, stderr)
		}
	}
	code, out, stderr := runClientCLI(t, envs, "watch", "--prefix", "jobs/", "--after", "0", "--count", "2")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 2 || !strings.Contains(lines[0], " granted jobs/a alice token=1 ttl=30s") ||
		!strings.Contains(lines[1], " released jobs/a alice token=1 held=") {
		t.Fatalf("watch: %d %q %s", code, out, stderr)
	}
	// The revision printed resumes after it: the release, then nothing else of jobs/.
	rev, _, _ := strings.Cut(lines[0], " ")
	code, out, _ = runClientCLI(t, envs, "watch", "jobs/a", "--after", rev, "--count", "1", "--json")
	if code != 0 || !strings.HasPrefix(out, `{"revision":"`) || !strings.Contains(out, `"type":"released"`) {
		t.Fatalf("watch --after %s --json: %d %q", rev, code, out)
	}
	srv.Fail("watch", api.CodeCompacted)
	if code, _, stderr := runClientCLI(t, envs, "watch", "jobs/a", "--after", "1.1"); code != 1 || !strings.Contains(stderr, "older than the server's history") {
		t.Fatalf("compacted: %d %s", code, stderr)
	}
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"watch"}, "want KEY"},
		{[]string{"watch", "--prefix"}, "want PREFIX"},
		{[]string{"watch", "k", "--after", "x"}, "--after: revision must be"},
		{[]string{"watch", "k", "--count", "-1"}, "--count must not be negative"},
	} {
		if code, _, stderr := runClientCLI(t, envs, c.args...); code != 2 || !strings.Contains(stderr, c.msg) {
			t.Errorf("%v: %d %s", c.args, code, stderr)
		}
	}
}

// TestWatchHelpExitStatus: watch's help tells its own exit statuses, not
// the lock commands' "held by another".
func TestWatchHelpExitStatus(t *testing.T) {
	out, errs, code := runCLI(t, "", "watch", "-h")
	if code != 0 || errs != "" {
		t.Fatalf("watch -h: exit %d, stderr %q", code, errs)
	}
	if strings.Contains(out, "held by another") || !strings.Contains(out, "older than the server's history") {
		t.Errorf("watch -h tells the wrong exit statuses:\n%s", out)
	}
}
