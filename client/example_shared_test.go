package client_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/client/clienttest"
	"github.com/fencelock/fencelock/fence"
)

// Two permits of a semaphore, each its own lease and token; a resource
// fences each permit's slot; a third caller that does not wait is told
// the permits are taken.
func ExampleClient_AcquireSemaphore() {
	srv := clienttest.NewServer(client.SystemClock{}) // stands in for `fencelock server`
	defer srv.Close()
	c, err := client.New([]string{srv.Addr})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	ctx := context.Background()

	var guard fence.Guard // the resource's side
	for range 2 {
		l, err := c.AcquireSemaphore(ctx, "pool/gpu", 2, client.WithTTL(10*time.Second))
		if err != nil {
			fmt.Println(err)
			return
		}
		defer l.Release(ctx)
		slot := l.Lock().Slot
		err = guard.Do(ctx, fence.PermitResource("pool/gpu", slot), l.Token(), func() error { return nil })
		fmt.Printf("token %d, slot %d of %d, admitted: %v\n", l.Token(), slot, l.Lock().Permits, err == nil)
	}
	_, err = c.TryAcquire(ctx, "pool/gpu", client.WithPermits(2))
	fmt.Println("a third permit:", errors.Is(err, client.ErrHeld))
	_, err = c.TryAcquire(ctx, "pool/gpu")
	fmt.Println("an exclusive lock on it:", errors.Is(err, client.ErrKindMismatch))
	// Output:
	// token 1, slot 1 of 2, admitted: true
	// token 2, slot 2 of 2, admitted: true
	// a third permit: true
	// an exclusive lock on it: true
}
