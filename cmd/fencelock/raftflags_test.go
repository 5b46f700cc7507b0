package main

import (
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencelock/fencelock/internal/server"
)

func TestServerRaftTimingUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--heartbeat-timeout", "soon"}, nil, `--heartbeat-timeout (or FENCELOCK_HEARTBEAT_TIMEOUT) "soon" is not a duration`},
		{nil, map[string]string{"FENCELOCK_ELECTION_TIMEOUT": "1"}, `--election-timeout (or FENCELOCK_ELECTION_TIMEOUT) "1" is not a duration`},
		{[]string{"--leader-lease-timeout", "1ms"}, nil, "--leader-lease-timeout 1ms is out of range: 5ms to 1m"},
		{[]string{"--heartbeat-timeout", "2m", "--election-timeout", "2m"}, nil, "--heartbeat-timeout 2m0s is out of range"},
		{[]string{"--heartbeat-timeout", "2s", "--election-timeout", "1s"}, nil, "--election-timeout 1s must be at least --heartbeat-timeout 2s"},
		{[]string{"--heartbeat-timeout", "1s", "--election-timeout", "1s", "--leader-lease-timeout", "1500ms"}, nil,
			"--leader-lease-timeout 1.5s must not exceed --heartbeat-timeout 1s"},
	} {
		args := append([]string{"server", "--data", t.TempDir(), "--listen", "127.0.0.1:0"}, tc.args...)
		code, _, errs := runClientCLI(t, tc.env, args...)
		if code != exitUsage || !strings.Contains(errs, tc.want) {
			t.Errorf("%v %v: exit %d, stderr %q; want %d and %q", tc.args, tc.env, code, errs, exitUsage, tc.want)
		}
	}
}

// The flags and their variables reach raft: the server logs the timing
// it runs with, and a flag beats its variable.
func TestServerProcessRaftTimingFlags(t *testing.T) {
	t.Parallel()
	addr := freeAddr(t)
	p := startProc(t, t.TempDir(), []string{"FENCELOCK_ELECTION_TIMEOUT=900ms", "FENCELOCK_HEARTBEAT_TIMEOUT=100ms"},
		"--listen", addr, "--data", "d", "--heartbeat-timeout", "700ms", "--leader-lease-timeout", "300ms")
	p.waitReady(addr)
	p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.exitCode(); code != 0 {
		t.Fatalf("exit status %d", code)
	}
	want := "heartbeat_timeout=700ms election_timeout=900ms leader_lease_timeout=300ms"
	if !strings.Contains(p.stderr.String(), want) {
		t.Errorf("stderr does not log %q:\n%s", want, p.stderr.String())
	}
}

// TestOperationsRaftTimingTable (issue 44): the defaults docs/OPERATIONS.md
// gives for the three raft timing flags are the server's, which
// `fencelock server -h` shows and the server logs (raft timing ...).
// The table said 1s/1s/500ms, raft's own defaults, where the server runs
// 500ms/500ms/500ms.
func TestOperationsRaftTimingTable(t *testing.T) {
	doc, err := os.ReadFile("../../docs/OPERATIONS.md")
	if err != nil {
		t.Fatal(err)
	}
	d := server.DefaultConfig()
	for flag, want := range map[string]time.Duration{
		"--heartbeat-timeout":    d.HeartbeatTimeout,
		"--election-timeout":     d.ElectionTimeout,
		"--leader-lease-timeout": d.LeaderLeaseTimeout,
	} {
		m := regexp.MustCompile("(?m)^\\| `" + flag + "` \\| `[A-Z_]+` \\| ([^|]+) \\|").FindSubmatch(doc)
		if m == nil {
			t.Errorf("docs/OPERATIONS.md has no table row for %s", flag)
			continue
		}
		if got := strings.TrimSpace(string(m[1])); got != want.String() {
			t.Errorf("docs/OPERATIONS.md: %s defaults to %s; the server's default is %s", flag, got, want)
		}
	}
}
