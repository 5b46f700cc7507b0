//go:build unix

package main

import (
	"context"
	"fmt"
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
// almost its whole give-up time, 0.89×TTL, to find the new leader. (The
// kill just before an extension is due, the worst phase, is
// TestFailoverProcessWorstPhase's.)
//
// The two tests that hold a lease through the kill stay serial: their
// budget fits an election on an idle machine, but may not on two cores
// shared with the clusters of the parallel tests, where a lost lease
// would say nothing about the code.

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
	// Past the point where the keep-alive would have given up (0.89×TTL
	// after its last confirmed extension before the kill): three
	// extensions confirmed by the new leader, a TTL/3 apart.
	exited := func() bool {
		select {
		case <-lock.done:
			return true
		default:
			return false
		}
	}
	poll(t, "three extensions on the new leader", func() bool { return extendsOn(t, next.client) >= 3 || exited() })
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
	d0 := l.Deadline()
	poll(t, "an extension after the kill", func() bool { return !l.Deadline().Equal(d0) || l.Err() != nil })
	// A figure for the docs, not a check: the time between the sends of the
	// last extension confirmed before the kill and the first after it (the
	// budget is 0.89×TTL).
	t.Logf("kill -9 of %s: %v between confirmed sends across the failover (budget %v)",
		old.id, l.Deadline().Sub(d0).Round(time.Millisecond), failoverTTL-failoverTTL/100-client.StopGrace(failoverTTL))
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

// TestFailoverProcessWaitersMoveOffAFrozenLeader: waiting acquires queued
// on the leader, which is then frozen with SIGSTOP. Each waiter notices
// (its check of the node goes unanswered), re-sends the same wait to the
// new leader, and keeps its queue place: released one after another
// through the new leader, they are granted in the order they queued (not
// the order they re-sent in), each exactly once, and no other token is
// issued.
func TestFailoverProcessWaitersMoveOffAFrozenLeader(t *testing.T) {
	t.Parallel()
	c := startPCluster(t)
	ctx := context.Background()
	if r, ok := c.do(nil, "POST", "/v1/acquire", `{"key":"fo/w","holder":"x","ttl_ms":60000,"request_id":"x1"}`); !ok || token(r) != 1 {
		t.Fatalf("x's grant: %v %v", r, ok)
	}
	old := c.waitLeader()
	type result struct {
		i   int
		l   *client.Lease
		err error
	}
	const n = 4
	got := make(chan result, n)
	for i := range n {
		// Later waiters check their node more often, so they notice the
		// freeze and re-send first: the new leader must keep the places
		// the old queue gave them, not the order the re-sends arrive in.
		cl, err := client.New(c.clientAddrs(), client.WithWaitCheck(time.Duration(n-i)*400*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		go func() {
			l, err := cl.Acquire(ctx, "fo/w", client.WithTTL(10*time.Second), client.WithHolder(fmt.Sprintf("w%d", i)))
			got <- result{i, l, err}
		}()
		// Queued (committed) before the next one asks: that is the FIFO.
		poll(t, fmt.Sprintf("w%d's wait to commit", i), func() bool {
			return metricValue(metricsText(t, old.client), `fencelock_commit_seconds_count{op="wait"}`) == float64(i+1)
		})
	}
	old.p.cmd.Process.Signal(syscall.SIGSTOP)
	t.Cleanup(func() { old.p.cmd.Process.Signal(syscall.SIGCONT) })
	var next *pnode
	poll(t, "a new leader", func() bool { next = c.waitLeader(); return next != old })
	poll(t, "every waiter to re-send its wait to the new leader", func() bool {
		return metricValue(metricsText(t, next.client), "fencelock_waiters") == n
	})
	r := mustCall(t, next.client, "POST", "/v1/release", `{"key":"fo/w","holder":"x","request_id":"x2"}`)
	if r.body["released"] != true {
		t.Fatalf("release of x through the new leader: %v", r.body)
	}
	want := uint64(2)
	for i := range n {
		var res result
		select {
		case res = <-got:
		case <-time.After(30 * time.Second): // a bound on a hang, not a timing
			t.Fatalf("w%d was never granted", i)
		}
		if res.err != nil {
			t.Fatalf("grant %d: w%d: %v", i, res.i, res.err)
		}
		if res.i != i || res.l.Token() != want {
			t.Fatalf("grant %d: w%d with token %d; want w%d with token %d", i, res.i, res.l.Token(), i, want)
		}
		if g := mustCall(t, next.client, "GET", "/v1/lock?key=fo/w", ""); g.body["holder"] != fmt.Sprintf("w%d", i) || token(g) != want {
			t.Fatalf("the new leader has %v; want w%d with token %d", g.body, i, want)
		}
		if err := res.l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		want++
	}
	if last := metricValue(metricsText(t, next.client), "fencelock_last_token"); last != float64(want-1) {
		t.Fatalf("last token %v; want %d: one grant for x and one per waiter", last, want-1)
	}
	old.p.cmd.Process.Signal(syscall.SIGCONT)
}
