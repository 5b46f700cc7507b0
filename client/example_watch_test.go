package client_test

import (
	"context"
	"fmt"
	"time"

	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/client/clienttest"
)

// A watch from the present (WatchList's revision) sees each change once,
// in order; Revision is where to resume after a restart of the watcher.
func ExampleClient_Watch() {
	srv := clienttest.NewServer(client.SystemClock{})
	defer srv.Close()
	c, _ := client.New([]string{srv.Addr})
	defer c.Close()
	ctx := context.Background()

	_, rev, err := c.WatchList(ctx, "jobs/")
	if err != nil {
		fmt.Println(err)
		return
	}
	w := c.Watch(ctx, "jobs/", client.WatchAfter(rev))
	defer w.Close()
	lk, _ := c.Grant(ctx, "jobs/nightly", "alice", time.Minute, 0)
	_, _ = c.Release(ctx, "jobs/nightly", "alice", lk.Token)
	for range 2 {
		ev := <-w.Events()
		fmt.Println(ev.Type, ev.Key, ev.Holder, ev.Token)
	}
	// Output:
	// granted jobs/nightly alice 1
	// released jobs/nightly alice 1
}

// A leader writes with its election's token; when it resigns, the next
// candidate is elected with a larger one, which the resource's fence then
// prefers.
func ExampleClient_Campaign() {
	srv := clienttest.NewServer(client.SystemClock{})
	defer srv.Close()
	c, _ := client.New([]string{srv.Addr})
	defer c.Close()
	ctx := context.Background()

	first, err := c.Campaign(ctx, "elections/billing", "worker-1")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(first.Candidate(), "leads with token", first.Token())
	next := make(chan *client.Leader)
	go func() {
		l, _ := c.Campaign(ctx, "elections/billing", "worker-2")
		next <- l
	}()
	for len(srv.Waiters("elections/billing")) == 0 {
		time.Sleep(time.Millisecond) // until worker-2 is in line
	}
	_ = first.Resign(ctx)
	second := <-next
	defer second.Resign(ctx)
	fmt.Println(second.Candidate(), "leads with token", second.Token())
	// Output:
	// worker-1 leads with token 1
	// worker-2 leads with token 2
}
