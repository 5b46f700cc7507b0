package main

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/client/clienttest"
)

// TestGetAndListShowWaitersAndSession (issue 26.3): get and list show how
// many wait on a key and who is first, for a read/write lock's writer as
// for an exclusive waiter, and the session a lease is held under; the
// columns appear when something is in them, so an idle table is as before.
func TestGetAndListShowWaitersAndSession(t *testing.T) {
	srv := clienttest.NewServer(client.SystemClock{})
	defer srv.Close()
	envs := map[string]string{"FENCELOCK_ADDR": srv.Addr}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	// wait runs a waiting acquire until ctx ends.
	wait := func(args ...string) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var out, errb syncBuffer
			e := &env{stdin: strings.NewReader(""), stdout: &out, stderr: &errb, getenv: func(k string) string { return envs[k] }}
			_ = run(ctx, e, args)
		}()
	}
	waiting := func(key string, n int) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second) // a bound on a hang, not a timing
		for {
			_, out, _ := runClientCLI(t, envs, "get", key, "--json")
			var l api.Lease
			if json.Unmarshal([]byte(out), &l) == nil && l.Waiting == n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: never %d waiting (last answer %q)", key, n, out)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	steps := func(args ...string) string {
		t.Helper()
		code, out, errs := runClientCLI(t, envs, args...)
		if code != 0 {
			t.Fatalf("fencelock %s: exit %d, %s", strings.Join(args, " "), code, errs)
		}
		return out
	}
	steps("acquire", "doc", "--read", "--holder", "r1", "--ttl", "1m")
	steps("acquire", "doc", "--read", "--holder", "r2", "--ttl", "1m")
	id := strings.TrimSpace(steps("session", "open", "--holder", "s", "--ttl", "1m"))
	steps("acquire", "job", "--holder", "s", "--session", id)
	wait("acquire", "doc", "--write", "--holder", "w", "--wait", "1m")
	waiting("doc", 1)
	wait("acquire", "job", "--holder", "q", "--wait", "1m")
	waiting("job", 1)
	wait("acquire", "job", "--holder", "q2", "--wait", "1m")
	waiting("job", 2)

	out := steps("list")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	wantCols := []string{"KEY", "KIND", "HOLDER", "TOKEN", "TTL", "REMAINING", "SESSION", "WAITING", "NEXT"}
	if len(lines) != 4 || strings.Join(strings.Fields(lines[0]), " ") != strings.Join(wantCols, " ") {
		t.Fatalf("list:\n%s", out)
	}
	for i, want := range [][]string{
		{"doc", "rwlock/read", "r1", "-", "1", "w/write"},
		{"doc", "rwlock/read", "r2", "-", "1", "w/write"}, // the key's queue on each of its rows
		{"job", "exclusive", "s", id, "2", "q"},
	} {
		f := strings.Fields(lines[i+1])
		got := []string{f[0], f[1], f[2], f[6], f[7], f[8]}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Fatalf("list row %d: %q, want %v (in %q)", i+1, lines[i+1], want, out)
		}
	}
	out = steps("get", "job")
	if rows := strings.Split(strings.TrimSpace(out), "\n"); len(rows) != 2 ||
		strings.Join(strings.Fields(rows[0]), " ") != "KEY HOLDER TOKEN TTL REMAINING SESSION WAITING NEXT" ||
		!strings.HasSuffix(strings.Join(strings.Fields(rows[1]), " "), " "+id+" 2 q") {
		t.Fatalf("get job:\n%s", out)
	}
	var l api.Lease
	if err := json.Unmarshal([]byte(steps("get", "doc", "--json")), &l); err != nil || l.Waiting != 1 || l.NextWaiter == nil || l.NextWaiter.Holder != "w" || l.NextWaiter.Mode != api.ModeWrite {
		t.Fatalf("get doc --json: %+v %v", l, err)
	}
	if err := json.Unmarshal([]byte(steps("get", "job", "--json")), &l); err != nil || l.Session == 0 || l.Waiting != 2 || l.NextWaiter.Holder != "q" {
		t.Fatalf("get job --json: %+v %v", l, err)
	}
}
