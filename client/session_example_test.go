package client_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/client/clienttest"
)

// Many locks under one session: one keep-alive for all of them, and they
// all end with it.
func ExampleNewSession() {
	srv := clienttest.NewServer(client.SystemClock{}) // stands in for `fencelock server`
	defer srv.Close()
	c, err := client.New([]string{srv.Addr})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	ctx := context.Background()
	s, err := client.NewSession(ctx, c, client.WithSessionTTL(10*time.Second), client.WithSessionHolder("indexer"))
	if err != nil {
		fmt.Println(err)
		return
	}
	locks, err := s.AcquireAll(ctx, []string{"shards/1", "shards/2", "shards/3"})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, l := range locks {
		fmt.Println(l.Key(), "token", l.Token()) // each resource checks its own token
	}
	if err := s.Close(ctx); err != nil {
		fmt.Println(err)
	}
	fmt.Println(errors.Is(context.Cause(locks[0].Context()), client.ErrSessionClosed))
	// Output:
	// shards/1 token 1
	// shards/2 token 2
	// shards/3 token 3
	// true
}
