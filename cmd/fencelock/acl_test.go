package main

import (
	"strings"
	"testing"

	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/client/clienttest"
)

// The acl command end to end against a real server in-process: bootstrap
// once, a policy and a token, and the client commands with --auth-token
// and FENCELOCK_AUTH_TOKEN (not FENCELOCK_TOKEN, the fencing token).
func TestACLCommands(t *testing.T) {
	srv := clienttest.NewServer(client.SystemClock{})
	defer srv.Close()
	envs := map[string]string{"FENCELOCK_ADDR": srv.Addr}
	code, admin, errs := runClientCLI(t, envs, "acl", "bootstrap")
	admin = strings.TrimSpace(admin)
	if code != 0 || !strings.HasPrefix(admin, "flk_") || !strings.Contains(errs, "shown this once") {
		t.Fatalf("acl bootstrap: %d %q %q", code, admin, errs)
	}
	if code, out, errs := runClientCLI(t, envs, "acl", "bootstrap"); code != exitDenied || out != "" || !strings.Contains(errs, "already bootstrapped") {
		t.Fatalf("second acl bootstrap: %d %q %q", code, out, errs)
	}
	if code, _, errs := runClientCLI(t, envs, "acquire", "jobs/a", "--holder", "ci"); code != exitDenied || !strings.Contains(errs, "authentication required") {
		t.Fatalf("acquire without a token: %d %q", code, errs)
	}
	if code, _, errs := runClientCLI(t, envs, "acl", "policy", "set", "jobs", "--rule", "jobs/:lock,read", "--rule", "jobs/secret/:read:deny", "--auth-token", admin); code != 0 {
		t.Fatalf("acl policy set: %d %q", code, errs)
	}
	code, ci, errs := runClientCLI(t, envs, "acl", "token", "create", "--name", "ci", "--policy", "jobs", "--auth-token", admin)
	ci = strings.TrimSpace(ci)
	if code != 0 || !strings.HasPrefix(ci, "flk_") {
		t.Fatalf("acl token create: %d %q %q", code, ci, errs)
	}
	// A second create of the name is "no", not bad usage, and names the
	// flag that replaces it; the first secret keeps working.
	if code, out, errs := runClientCLI(t, envs, "acl", "token", "create", "--name", "ci", "--policy", "jobs", "--auth-token", admin); code != 1 || out != "" ||
		!strings.Contains(errs, "--replace") || strings.Contains(errs, "pass replace") {
		t.Fatalf("acl token create of an existing name: exit %d, stdout %q, stderr %q; want 1 and --replace named", code, out, errs)
	}
	if code, out, errs := runClientCLI(t, map[string]string{"FENCELOCK_ADDR": srv.Addr, "FENCELOCK_AUTH_TOKEN": admin}, "acl", "token", "list"); code != 0 ||
		!strings.Contains(out, "ci") || !strings.Contains(out, "admin") || strings.Contains(out, ci) {
		t.Fatalf("acl token list: %d %q %q", code, out, errs)
	}
	withCI := map[string]string{"FENCELOCK_ADDR": srv.Addr, "FENCELOCK_AUTH_TOKEN": ci, "FENCELOCK_TOKEN": "7"}
	for _, tc := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"acl", "whoami"}, 0, ""},
		{[]string{"acquire", "jobs/a", "--holder", "ci/w1", "--ttl", "30s"}, 0, ""},
		{[]string{"acquire", "jobs/b", "--holder", "bob"}, exitDenied, "may act only as holder"},
		{[]string{"acquire", "other/x", "--holder", "ci"}, exitDenied, "permission denied"},
		{[]string{"get", "jobs/a"}, 0, ""},
		{[]string{"acl", "token", "create", "--name", "x", "--policy", "admin"}, exitDenied, "permission denied"},
	} {
		code, out, errs := runClientCLI(t, withCI, tc.args...)
		if code != tc.code || !strings.Contains(errs, tc.stderr) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want %d and %q", tc.args, code, out, errs, tc.code, tc.stderr)
		}
	}
	if code, _, errs := runClientCLI(t, envs, "acl", "token", "delete", "--name", "ci", "--auth-token", admin); code != 0 {
		t.Fatalf("acl token delete: %d %q", code, errs)
	}
	if code, _, errs := runClientCLI(t, withCI, "get", "jobs/a"); code != exitDenied || !strings.Contains(errs, "unknown or deleted token") {
		t.Fatalf("get with a deleted token: %d %q", code, errs)
	}
}
