//go:build unix

package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// aclCLI runs the binary with FENCELOCK_ADDR=addrs and, if token is not
// "", FENCELOCK_AUTH_TOKEN=token; it returns stdout, stderr and the exit
// status.
func aclCLI(t *testing.T, addrs []string, token string, args ...string) (string, string, int) {
	t.Helper()
	return runBinary(t, []string{"FENCELOCK_ADDR=" + strings.Join(addrs, ","), "FENCELOCK_AUTH_TOKEN=" + token}, args...)
}

// runBinary runs the built fencelock with env added to the test's
// environment and returns its stdout, stderr and exit status.
func runBinary(t *testing.T, env []string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(fencelockBinary(t), args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errs syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &errs
	err := cmd.Run()
	var xe *exec.ExitError
	switch {
	case err == nil:
		return out.String(), errs.String(), 0
	case errors.As(err, &xe):
		return out.String(), errs.String(), xe.ExitCode()
	}
	t.Fatalf("%v: %v", args, err)
	return "", "", 0
}

// A cluster with ACLs on, as real processes: the unauthenticated
// join and remove are refused and change nothing; nodes that join with an
// admin token join and announce themselves; after the leader stops, the
// new leader enforces the same tables, and a restarted node keeps them.
func TestACLProcessCluster(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	c := &pcluster{t: t}
	for i := range 3 {
		c.nodes = append(c.nodes, &pnode{id: fmt.Sprintf("n%d", i+1), client: freeAddr(t), raft: freeAddr(t),
			data: filepath.Join(dir, fmt.Sprintf("n%d", i+1))})
	}
	n1 := c.nodes[0]
	c.start(n1)
	n1.p.waitReady(n1.client)
	one := []string{n1.client}
	out, errs, code := aclCLI(t, one, "", "acl", "bootstrap")
	admin := strings.TrimSpace(out)
	if code != 0 || !strings.HasPrefix(admin, "flk_") {
		t.Fatalf("acl bootstrap: exit %d %q %q", code, out, errs)
	}
	// The attack: an unauthenticated join naming an unreachable voter, and
	// a remove.
	for _, args := range [][]string{
		{"cluster", "join", "--id", "evil", "--raft", "127.0.0.1:1", "--client", "127.0.0.1:2", "--timeout", "5s"},
		{"cluster", "remove", "--id", "n1", "--timeout", "5s"},
	} {
		if out, errs, code := aclCLI(t, one, "", args...); code != 1 || !strings.Contains(errs, "unauthenticated") {
			t.Fatalf("%v without a token: exit %d %q %q", args, code, out, errs)
		}
	}
	if out, _, code := aclCLI(t, one, admin, "cluster", "members"); code != 0 || strings.Contains(out, "evil") || !strings.Contains(out, "n1") {
		t.Fatalf("members after the refused calls: exit %d\n%s", code, out)
	}
	if _, errs, code := aclCLI(t, one, admin, "acl", "policy", "set", "jobs", "--rule", "jobs/:lock,read"); code != 0 {
		t.Fatalf("policy set: %s", errs)
	}
	out, errs, code = aclCLI(t, one, admin, "acl", "token", "create", "--name", "ci", "--policy", "jobs")
	ci := strings.TrimSpace(out)
	if code != 0 || ci == "" {
		t.Fatalf("token create: exit %d %q", code, errs)
	}
	// The other nodes join with the admin token (it also lets them
	// announce their client addresses to the leader).
	for _, n := range c.nodes[1:] {
		c.start(n, "--join", n1.client, "--auth-token", admin)
	}
	all := c.clients()
	deadline := time.Now().Add(60 * time.Second)
	for {
		out, _, _ := aclCLI(t, all, admin, "cluster", "members")
		if v, _, _ := voterLines(out); v == 3 && strings.Contains(out, c.nodes[1].client) && strings.Contains(out, c.nodes[2].client) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the joined nodes never became announced voters:\n%s", out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if out, errs, code := aclCLI(t, all, ci, "acquire", "jobs/a", "--holder", "ci/w1", "--ttl", "1m"); code != 0 {
		t.Fatalf("ci acquire: exit %d %q %q", code, out, errs)
	}
	// The leader stops; the new one enforces the same tables.
	if err := n1.p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	n1.p.exitCode()
	rest := all[1:]
	deadline = time.Now().Add(60 * time.Second)
	for {
		_, errs, code := aclCLI(t, rest, ci, "acquire", "jobs/b", "--holder", "ci/w2", "--ttl", "1m")
		if code == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no new leader granted jobs/b: exit %d %q", code, errs)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, tc := range []struct {
		token string
		args  []string
		want  string
	}{
		{ci, []string{"acquire", "other/x", "--holder", "ci"}, "permission denied"},
		{ci, []string{"release", "jobs/a", "--holder", "someone"}, "permission denied"},
		{"", []string{"acquire", "jobs/c", "--holder", "ci"}, "authentication required"},
		{"", []string{"acl", "bootstrap"}, "already bootstrapped"},
	} {
		if out, errs, code := aclCLI(t, rest, tc.token, tc.args...); code != exitDenied || !strings.Contains(errs, tc.want) {
			t.Errorf("%v on the new leader: exit %d %q %q, want %d and %q", tc.args, code, out, errs, exitDenied, tc.want)
		}
	}
	// The stopped node comes back with the tables in its data dir.
	c.start(n1, "--auth-token", admin)
	deadline = time.Now().Add(60 * time.Second)
	for {
		out, _, code := aclCLI(t, one, ci, "acl", "whoami")
		if code == 0 && strings.TrimSpace(out) == "ci" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the restarted node does not know ci: exit %d %q", code, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
