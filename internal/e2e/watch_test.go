//go:build unix

package e2e

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/client"
)

// A watcher across kill -9 or SIGSTOP of the leader it watches on: it goes
// on at another node after the last revision it saw, and sees every grant
// exactly once. Every grant issues the next token, so the granted events
// of a gap-free stream carry 1, 2, 3, ... with none missing and none
// twice, up to the last token the writers were given; and every release
// they were told succeeded is there too.
func TestWatchAcrossLeaderFaults(t *testing.T) {
	fencelockBinary(t)
	t.Parallel()
	for _, fault := range []string{"leader-kill", "leader-stop"} {
		t.Run(fault, func(t *testing.T) {
			t.Parallel()
			watchAcross(t, fault)
		})
	}
}

func watchAcross(t *testing.T, fault string) {
	c := startCluster(t, 3, false)
	l := c.leader(60 * time.Second)
	addrs := []string{l.client} // the watch starts on the leader
	for _, n := range c.nodes {
		if n != l {
			addrs = append(addrs, n.client)
		}
	}
	wc, err := client.New(addrs, client.WithWaitCheck(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer wc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w := wc.Watch(ctx, "w/", client.WatchAfter(client.Revision{Index: 0, Seq: api.EndOfEntry}), client.WatchWait(2*time.Second), client.WatchBuffer(1024))
	defer w.Close()

	type release struct {
		key   string
		token uint64
	}
	var (
		mu       sync.Mutex
		maxToken uint64
		released []release
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl, err := client.New(c.addrs())
			if err != nil {
				t.Error(err)
				return
			}
			defer cl.Close()
			key := fmt.Sprintf("w/%d", i)
			for {
				select {
				case <-stop:
					return
				default:
				}
				octx, ocancel := context.WithTimeout(ctx, opTimeout)
				lk, err := cl.Grant(octx, key, "h", time.Minute, 0)
				if err == nil {
					mu.Lock()
					maxToken = max(maxToken, lk.Token)
					mu.Unlock()
					if _, err := cl.Release(octx, key, "h", lk.Token); err == nil {
						mu.Lock()
						released = append(released, release{key, lk.Token})
						mu.Unlock()
					}
				}
				ocancel()
			}
		}()
	}
	time.Sleep(800 * time.Millisecond) // load before the fault
	if fault == "leader-stop" {
		c.signal(l, syscall.SIGSTOP)
	} else {
		c.kill(l)
	}
	if c.waitLeader(l, 30*time.Second) == nil {
		c.signal(l, syscall.SIGCONT)
		t.Fatalf("no new leader after the %s", fault)
	}
	time.Sleep(800 * time.Millisecond) // load after it
	if fault == "leader-stop" {
		c.signal(l, syscall.SIGCONT)
	} else {
		c.start(l)
	}
	time.Sleep(400 * time.Millisecond)
	close(stop)
	wg.Wait()

	mu.Lock()
	last, rels := maxToken, released
	mu.Unlock()
	if last == 0 {
		t.Fatal("no grant at all")
	}
	seen := map[uint64]int{}
	relSeen := map[release]bool{}
	var prev client.Revision
	for next := uint64(1); next <= last; {
		select {
		case ev, ok := <-w.Events():
			if !ok {
				t.Fatalf("the watch ended: %v", w.Err())
			}
			if ev.Revision.Compare(prev) <= 0 {
				t.Fatalf("revision %s after %s", ev.Revision, prev)
			}
			prev = ev.Revision
			switch ev.Type {
			case api.WatchGranted:
				if ev.Token != next {
					t.Fatalf("granted token %d at %s, want %d: a gap or a repeat", ev.Token, ev.Revision, next)
				}
				seen[ev.Token]++
				next++
			case api.WatchReleased:
				relSeen[release{ev.Key, ev.Token}] = true
			}
		case <-ctx.Done():
			t.Fatalf("the watcher saw tokens up to %d of %d", len(seen), last)
		}
	}
	// The releases of the last grants may still be on their way.
	for _, r := range rels {
		for !relSeen[r] {
			select {
			case ev, ok := <-w.Events():
				if !ok {
					t.Fatalf("the watch ended: %v", w.Err())
				}
				if ev.Type == api.WatchReleased {
					relSeen[release{ev.Key, ev.Token}] = true
				}
			case <-ctx.Done():
				t.Fatalf("release of %s token %d acknowledged but not watched", r.key, r.token)
			}
		}
	}
	t.Logf("%d grants and %d releases watched across the %s, last revision %s", last, len(rels), fault, prev)
}
