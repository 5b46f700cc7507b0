package main

import (
	"strings"
	"testing"

	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/client/clienttest"
)

func TestSharedCommands(t *testing.T) {
	srv := clienttest.NewServer(client.SystemClock{})
	defer srv.Close()
	envs := map[string]string{"FENCELOCK_ADDR": srv.Addr}
	for _, tc := range []struct {
		args   []string
		code   int
		stdout string // "…" stands for anything
		stderr string // substring
	}{
		{[]string{"acquire", "pool", "-n", "2", "--holder", "a", "--ttl", "30s"}, 0, "1\n", ""},
		{[]string{"acquire", "pool", "--n=2", "--holder", "b", "--ttl", "30s", "--json"}, 0, `{"key":"pool","holder":"b","token":2,"ttl_ms":30000,"remaining_ms":…` + `"kind":"semaphore","permits":2,"slot":2}` + "\n", ""},
		{[]string{"acquire", "pool", "-n", "2", "--holder", "c", "--try"}, 1, "", "held by another holder"},
		{[]string{"acquire", "pool", "-n", "3", "--holder", "c"}, 1, "", "semaphore of 2 permits"},
		{[]string{"acquire", "pool", "--holder", "c"}, 1, "", "key is a semaphore"},
		{[]string{"lock", "pool", "-n", "2", "--try", "--", "echo", "never"}, 1, "", "held"},
		{[]string{"list", "pool"}, 0, "KEY   KIND         HOLDER  TOKEN  TTL  REMAINING\npool  semaphore/2  a       1 …", ""},
		{[]string{"get", "pool"}, 0, "KEY   KIND         HOLDER  TOKEN  TTL  REMAINING\npool  semaphore/2  a       1 …", ""},
		{[]string{"release", "pool", "--holder", "a"}, 0, "", ""},
		{[]string{"lock", "pool", "-n", "2", "--holder", "l", "--", "sh", "-c", `echo "$FENCELOCK_TOKEN $FENCELOCK_SLOT/$FENCELOCK_PERMITS"`}, 0, "3 1/2\n", ""},
		{[]string{"acquire", "doc", "--read", "--holder", "r1"}, 0, "4\n", ""},
		{[]string{"lock", "doc", "--read", "--", "sh", "-c", `echo "$FENCELOCK_TOKEN $FENCELOCK_MODE"`}, 0, "5 read\n", ""},
		{[]string{"acquire", "doc", "--write", "--holder", "w", "--try"}, 1, "", "held"},
		{[]string{"acquire", "doc", "--holder", "w"}, 1, "", "rwlock"},
		{[]string{"list", "doc", "--json"}, 0, `{"locks":[{"key":"doc","holder":"r1","token":4,"ttl_ms":10000,"remaining_ms":…,"kind":"rwlock","mode":"read"}]}` + "\n", ""},
		// Bad usage: 2.
		{[]string{"acquire", "k", "--holder", "h", "-n", "2", "--read"}, 2, "", "--n, --read and --write exclude each other"},
		{[]string{"lock", "k", "--read", "--write", "--", "true"}, 2, "", "exclude each other"},
		{[]string{"acquire", "k", "--holder", "h", "-n", "1001"}, 2, "", "--n must be between 1 and 1000"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, out, errs := runClientCLI(t, envs, tc.args...)
			if code != tc.code {
				t.Errorf("exit %d, want %d (stderr %q)", code, tc.code, errs)
			}
			if pre, post, ok := strings.Cut(tc.stdout, "…"); ok {
				if !strings.HasPrefix(out, pre) || !strings.HasSuffix(out, post) {
					t.Errorf("stdout %q, want %q", out, tc.stdout)
				}
			} else if out != tc.stdout {
				t.Errorf("stdout %q, want %q", out, tc.stdout)
			}
			if !strings.Contains(errs, tc.stderr) || (tc.stderr == "" && errs != "") {
				t.Errorf("stderr %q, want %q", errs, tc.stderr)
			}
		})
	}
}
