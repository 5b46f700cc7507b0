package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencelock/fencelock/client"
)

// Held leases through the loss of their leader, on real processes: a
// 3-node cluster, the lease's holder given every address, and the leader
// killed with SIGKILL while the lease is held. The survivors elect a leader
// and the holder's next extension reaches it: the lease goes on under the
// same token.
//
// The kill comes right after an extension was confirmed, so the holder has
// almost TTL/2 to find the new leader. (Killed just before an extension
// was due, it would have only about TTL/6: with ttl 4s less than an
// election takes, and losing the lease then is the safe stop of DESIGN §4.)

const failoverTTL = 4 * time.Second

var extendsOK = regexp.MustCompile(`(?m)^fencelock_extends_total\{result="ok"\} (\d+)`)

// extendsOn is how many extensions addr has confirmed; -1 if it did not
// answer.
func extendsOn(t *testing.T, addr string) int {
	m := extendsOK.FindStringSubmatch(metricsText(t, addr))
	if m == nil {
		return -1
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

func (c *pcluster) clientAddrs() []string {
	var out []string
	for _, n := range c.nodes {
		out = append(out, n.client)
	}
	return out
}

// killLeaderAfterExtend waits until the leader confirms one more extension
// than it had, kills it with SIGKILL and returns it and the new leader.
func (c *pcluster) killLeaderAfterExtend(t *testing.T) (old, next *pnode) {
	t.Helper()
	old = c.waitLeader()
	base := extendsOn(t, old.client)
	poll(t, "an extension on the leader", func() bool { return extendsOn(t, old.client) > base })
	old.p.cmd.Process.Signal(syscall.SIGKILL)
	<-old.p.done
	poll(t, "a new leader", func() bool { next = c.waitLeader(); return next != old })
	return old, next
}

func TestFailoverProcessLockRidesThroughKill9OfLeader(t *testing.T) {
	c := startPCluster(t)
	dir := t.TempDir()
	script := `echo "$FENCELOCK_TOKEN" > token.tmp && mv token.tmp token
while [ ! -e go ]; do sleep 0.02; done
echo "$FENCELOCK_TOKEN" > token2`
	lock := startBG(t, dir, []string{"FENCELOCK_ADDR=" + strings.Join(c.clientAddrs(), ",")},
		"lock", "fo/x", "--ttl", failoverTTL.String(), "--", "sh", "-c", script)
	var tok string
	eventually(t, "the child to start", func() bool {
		b, err := os.ReadFile(filepath.Join(dir, "token"))
		tok = strings.TrimSpace(string(b))
		return err == nil && tok != ""
	})
	_, next := c.killLeaderAfterExtend(t)
	// Past the point where the old keep-alive gave up (TTL/2 after its last
	// confirmed extension): two extensions confirmed by the new leader.
	exited := func() bool {
		select {
		case <-lock.done:
			return true
		default:
			return false
		}
	}
	poll(t, "two extensions on the new leader", func() bool { return extendsOn(t, next.client) >= 2 || exited() })
	if exited() {
		t.Fatalf("lock exited while a majority was up: %d, stderr %q", lock.cmd.ProcessState.ExitCode(), lock.stderr.String())
	}
	if r := mustCall(t, next.client, "GET", "/v1/check?key=fo/x&token="+tok, ""); r.body["valid"] != true {
		t.Fatalf("token %s not valid on the new leader: %v", tok, r.body)
	}
	if r := mustCall(t, next.client, "GET", "/v1/lock?key=fo/x", ""); strconv.FormatUint(token(r), 10) != tok {
		t.Fatalf("the new leader has %v; want the child's token %s", r.body, tok)
	}
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code := lock.exitCode(t); code != 0 {
		t.Fatalf("lock exit %d, stderr %q; want 0", code, lock.stderr.String())
	}
	if b, err := os.ReadFile(filepath.Join(dir, "token2")); err != nil || strings.TrimSpace(string(b)) != tok {
		t.Fatalf("child's token after the failover %q, %v; want %s", b, err, tok)
	}
	if r := mustCall(t, next.client, "GET", "/v1/lock?key=fo/x", ""); r.status != 404 {
		t.Fatalf("after lock exited the new leader has %d %v; want it released", r.status, r.body)
	}
}

func TestFailoverProcessLeaseRidesThroughKill9OfLeader(t *testing.T) {
	c := startPCluster(t)
	cl, err := client.New(c.clientAddrs())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	l, err := cl.TryAcquire(ctx, "fo/lease", client.WithTTL(failoverTTL), client.WithHolder("h"))
	if err != nil {
		t.Fatal(err)
	}
	tok := l.Token()
	old, next := c.killLeaderAfterExtend(t)
	poll(t, "two extensions on the new leader", func() bool { return extendsOn(t, next.client) >= 2 || l.Err() != nil })
	if err := l.Err(); err != nil || l.Context().Err() != nil {
		t.Fatalf("lease lost after kill -9 of %s while a majority was up: %v", old.id, err)
	}
	if l.Token() != tok {
		t.Fatalf("token %d, want %d", l.Token(), tok)
	}
	if ok, err := cl.Check(ctx, "fo/lease", tok); !ok || err != nil {
		t.Fatalf("Check(%d) on the new leader = %v, %v", tok, ok, err)
	}
	if got := cl.Addrs()[0]; got != "http://"+next.client {
		t.Fatalf("the client prefers %s; want the new leader %s", got, next.client)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
