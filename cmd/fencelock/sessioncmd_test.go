package main

import (
	"strings"
	"testing"

	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/client/clienttest"
)

func TestSessionAndMultiKeyCommands(t *testing.T) {
	srv := clienttest.NewServer(client.SystemClock{})
	defer srv.Close()
	envs := map[string]string{"FENCELOCK_ADDR": srv.Addr}
	for _, tc := range []struct {
		args   []string
		code   int
		stdout string // exact, or a prefix when it ends in "…"
		stderr string // substring
	}{
		{[]string{"session", "open", "--holder", "svc", "--ttl", "1m"}, 0, "1\n", ""},
		{[]string{"acquire", "a", "b", "--holder", "svc", "--session", "1"}, 0, "a 1\nb 2\n", ""},
		{[]string{"acquire", "c", "--holder", "svc", "--session", "1", "--json"}, 0, `{"key":"c","holder":"svc","token":3,"ttl_ms":60000,…`, ""},
		{[]string{"acquire", "x", "b", "--holder", "other", "--ttl", "1m", "--try"}, 1, "", `acquire x b: "b" is held by another holder; no key was granted`},
		{[]string{"get", "x"}, 1, "", "no live lease"},
		{[]string{"acquire", "d", "--holder", "other", "--session", "1"}, 1, "", "no such live session"},
		{[]string{"session", "extend", "1", "--holder", "svc"}, 0, "session 1: 3 locks, …", ""},
		{[]string{"session", "extend", "1", "--holder", "other"}, 1, "", "session extend: no such live session"},
		{[]string{"session", "close", "1", "--holder", "svc"}, 0, "session 1 closed: 3 locks released\n", ""},
		{[]string{"get", "a"}, 1, "", "no live lease"},
		{[]string{"session", "extend", "1", "--holder", "svc"}, 1, "", "no such live session"},
		{[]string{"acquire", "e", "f", "--holder", "h", "--ttl", "1m", "--lock-delay", "5s", "--json"}, 0, `{"locks":[{"key":"e","holder":"h","token":4,…`, ""},
		// Bad usage: 2.
		{[]string{"session"}, 2, "", "want open, extend ID or close ID"},
		{[]string{"session", "open"}, 2, "", "--holder is required"},
		{[]string{"session", "shut", "--holder", "h"}, 2, "", `unknown session command "shut"`},
		{[]string{"session", "close", "x", "--holder", "h"}, 2, "", "ID must be a session id"},
		{[]string{"session", "extend", "1", "--holder", "h", "--ttl", "1m"}, 2, "", "--ttl is the session's"},
		{[]string{"acquire", "e", "g", "--holder", "h2", "--ttl", "1m", "--wait", "200ms"}, 1, "", `"e" is held by another holder; no key was granted`},
		{[]string{"acquire", "a", "a", "--holder", "h"}, 2, "", `acquire: KEY lists "a" twice`},
		{[]string{"acquire", "a", "--holder", "h", "--lock-delay", "2m"}, 2, "", "--lock-delay must be between 0s and 1m"},
		{[]string{"acquire", "a", "--holder", "h", "--session", "1", "--ttl", "1m"}, 2, "", "--ttl and --session"},
		{[]string{"lock", "k", "--lock-delay", "61s", "--", "true"}, 2, "", "--lock-delay must be between"},
	} {
		code, stdout, stderr := runClientCLI(t, envs, tc.args...)
		okOut := stdout == tc.stdout
		if p, ok := strings.CutSuffix(tc.stdout, "…"); ok {
			okOut = strings.HasPrefix(stdout, p)
		}
		if code != tc.code || !okOut || !strings.Contains(stderr, tc.stderr) {
			t.Errorf("fencelock %s: exit %d, stdout %q, stderr %q; want %d, %q, %q",
				strings.Join(tc.args, " "), code, stdout, stderr, tc.code, tc.stdout, tc.stderr)
		}
	}
}
