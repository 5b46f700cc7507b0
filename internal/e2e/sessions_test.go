//go:build unix

package e2e

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencelock/fencelock/client"
)

// Sessions under faults: kill -9 of the leader, SIGSTOP of the leader, the
// leader replaced by a fresh node (cluster remove, then server --join) and
// a partition of the leader, on 3 real processes. Through the fault:
//
//   - session K ("keeper") is kept alive by client.Session over the fault
//     and holds 16 locks; while its handle says it is alive, every one of
//     them is held by it under its original token;
//   - session D ("doomed") is opened and never extended: it expires during
//     or just after the fault, and its 16 locks, each with a waiter
//     queued, must go together: every read of the lock table (a List, one
//     linearizable snapshot on the leader) sees all of D's grants or none;
//   - across every read, a token is never seen with two (key, holder)
//     pairs, and never goes backwards on a key;
//   - at the end, closing K frees all its keys in one step.
//
// Short enough for CI: about 10 s per class.
func TestSessionFaults(t *testing.T) {
	fencelockBinary(t)
	t.Parallel()
	for _, fc := range []struct {
		name  string
		netns bool
	}{
		{"leader-kill", false},
		{"leader-stop", false},
		{"membership", false},
		{"partition", true},
	} {
		t.Run(fc.name, func(t *testing.T) {
			t.Parallel()
			if fc.netns {
				if why := netnsUnavailable(); why != "" {
					t.Skipf("skipping: %s", why)
				}
			}
			sessionFaultRun(t, fc.name, fc.netns)
		})
	}
}

func sessionFaultRun(t *testing.T, fault string, netns bool) {
	c := startCluster(t, 3, netns)
	ctx := context.Background()
	cl, err := client.New(c.addrs())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	const n = 16
	keep, err := client.NewSession(ctx, cl, client.WithSessionTTL(12*time.Second), client.WithSessionHolder("keeper"))
	if err != nil {
		t.Fatalf("open keeper: %v", err)
	}
	var kKeys, dKeys []string
	for i := range n {
		kKeys = append(kKeys, fmt.Sprintf("k/%02d", i))
		dKeys = append(dKeys, fmt.Sprintf("d/%02d", i))
	}
	kLocks, err := keep.AcquireAll(ctx, kKeys)
	if err != nil {
		t.Fatalf("keeper's locks: %v", err)
	}
	kTok := map[string]uint64{}
	for _, l := range kLocks {
		kTok[l.Key()] = l.Token()
	}
	doomed, err := cl.OpenSession(ctx, "doomed", 2500*time.Millisecond)
	if err != nil {
		t.Fatalf("open doomed: %v", err)
	}
	dLocks, err := cl.AcquireAll(ctx, dKeys, "doomed", 0, client.GrantOptions{Session: doomed.ID})
	if err != nil {
		t.Fatalf("doomed's locks: %v", err)
	}
	dTok := map[string]uint64{}
	for _, l := range dLocks {
		dTok[l.Key] = l.Token
	}
	// A waiter on every one of the doomed session's keys.
	var wg sync.WaitGroup
	wctx, wcancel := context.WithTimeout(ctx, 60*time.Second)
	defer wcancel()
	granted := make(chan client.Lock, n)
	for _, k := range dKeys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for wctx.Err() == nil {
				lk, err := cl.Grant(wctx, k, "waiter", time.Minute, 30*time.Second)
				if err == nil {
					granted <- lk
					return
				}
				time.Sleep(50 * time.Millisecond) // a failover ended the wait: queue again
			}
		}()
	}

	// The observer: a List of every key, as often as it answers.
	type seen struct{ key, holder string }
	var (
		mu         sync.Mutex
		violations []string
		reads      int
		dGoneAt    = -1 // the first read with none of D's grants
	)
	byToken := map[uint64]seen{}
	lastTok := map[string]uint64{}
	stop := make(chan struct{})
	observed := make(chan struct{})
	go func() {
		defer close(observed)
		for {
			select {
			case <-stop:
				return
			default:
			}
			rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			locks, err := cl.List(rctx, "", 0)
			aliveK := keep.Err() == nil
			cancel()
			if err != nil {
				time.Sleep(20 * time.Millisecond)
				continue
			}
			mu.Lock()
			reads++
			dHeld, kHeld := 0, 0
			for _, l := range locks {
				if s, ok := byToken[l.Token]; ok && s != (seen{l.Key, l.Holder}) {
					violations = append(violations, fmt.Sprintf("token %d seen on %v and on %s/%s", l.Token, s, l.Key, l.Holder))
				}
				byToken[l.Token] = seen{l.Key, l.Holder}
				if l.Token < lastTok[l.Key] {
					violations = append(violations, fmt.Sprintf("%s: token %d after %d", l.Key, l.Token, lastTok[l.Key]))
				}
				lastTok[l.Key] = l.Token
				if l.Holder == "doomed" && dTok[l.Key] == l.Token {
					dHeld++
				}
				if l.Holder == "keeper" && kTok[l.Key] == l.Token {
					kHeld++
				}
			}
			if dHeld != 0 && dHeld != n {
				violations = append(violations, fmt.Sprintf("read %d: %d of the doomed session's %d locks held", reads, dHeld, n))
			}
			if dHeld == 0 && dGoneAt < 0 {
				dGoneAt = reads
			}
			if dHeld == n && dGoneAt >= 0 {
				violations = append(violations, fmt.Sprintf("read %d: the doomed session's locks came back", reads))
			}
			if aliveK && kHeld != n {
				// The handle may have been alive when the read was made
				// and lost since only if it is lost now.
				if keep.Err() == nil {
					violations = append(violations, fmt.Sprintf("read %d: keeper alive but holds %d of its %d locks", reads, kHeld, n))
				}
			}
			mu.Unlock()
			time.Sleep(10 * time.Millisecond)
		}
	}()

	time.Sleep(300 * time.Millisecond)
	l := c.leader(30 * time.Second)
	switch fault {
	case "leader-kill":
		c.kill(l)
		time.Sleep(1500 * time.Millisecond)
		c.start(l)
	case "leader-stop":
		c.signal(l, syscall.SIGSTOP)
		if c.waitLeader(l, 30*time.Second) == nil {
			c.signal(l, syscall.SIGCONT)
			t.Fatal("no other leader after SIGSTOP of the leader")
		}
		time.Sleep(1000 * time.Millisecond)
		c.signal(l, syscall.SIGCONT)
	case "membership":
		if err := c.replace(t, l); err != nil {
			t.Fatal(err)
		}
	case "partition":
		if err := c.isolate(l, true); err != nil {
			t.Fatal(err)
		}
		if c.waitLeader(l, 30*time.Second) == nil {
			t.Fatal("no other leader after the partition")
		}
		time.Sleep(1000 * time.Millisecond)
		if err := c.isolate(l, false); err != nil {
			t.Fatal(err)
		}
	}
	// Every waiter is granted once the doomed session has expired.
	got := map[string]client.Lock{}
	for len(got) < n {
		select {
		case lk := <-granted:
			got[lk.Key] = lk
		case <-time.After(20 * time.Second):
			t.Fatalf("only %d of %d waiters granted after the doomed session's expiry", len(got), n)
		}
	}
	wcancel()
	wg.Wait()
	time.Sleep(300 * time.Millisecond) // reads after the hand-off, too
	for k, lk := range got {
		if lk.Token <= dTok[k] {
			t.Errorf("%s: waiter's token %d not above the session's %d", k, lk.Token, dTok[k])
		}
	}
	if err := keep.Err(); err != nil {
		t.Errorf("the keeper's session was lost over a %s: %v", fault, err)
	}
	// Closing the keeper frees all its keys at once.
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := keep.Close(cctx); err != nil && !errors.Is(err, client.ErrSessionLost) {
		t.Errorf("close: %v", err)
	}
	locks, err := cl.List(cctx, "k/", 0)
	if err != nil || len(locks) != 0 {
		t.Errorf("after close: %d keeper keys still held (%v)", len(locks), err)
	}
	close(stop)
	<-observed
	mu.Lock()
	defer mu.Unlock()
	for _, v := range violations {
		t.Error(v)
	}
	if reads < 10 || dGoneAt < 0 || reads-dGoneAt < 3 {
		t.Errorf("only %d reads (the doomed session's end seen at read %d): the checks saw too little", reads, dGoneAt)
	}
	t.Logf("%s: %d reads; the doomed session's locks gone together at read %d", fault, reads, dGoneAt)
}
