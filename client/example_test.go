package client_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/client/clienttest"
)

// A lease held while work runs: the token goes with every write to the
// resource, and the work stops when the lease's context is cancelled.
func ExampleClient_Acquire() {
	srv := clienttest.NewServer(client.SystemClock{}) // stands in for `fencelock server`
	defer srv.Close()
	c, err := client.New([]string{srv.Addr})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	ctx := context.Background()
	lease, err := c.Acquire(ctx, "jobs/nightly", client.WithTTL(10*time.Second), client.WithHolder("worker-1"))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("token", lease.Token())
	select {
	case <-lease.Done():
		fmt.Println("lost:", lease.Err())
	default:
		fmt.Println("held; work here, sending the token to the resource")
	}
	if err := lease.Release(ctx); err != nil {
		fmt.Println(err)
	}
	fmt.Println(lease.Err())
	// Output:
	// token 1
	// held; work here, sending the token to the resource
	// fencelock: lease released
}

// TryAcquire does not wait; a held key is an error matching ErrHeld, and the
// *APIError says who holds it.
func ExampleClient_TryAcquire() {
	srv := clienttest.NewServer(client.SystemClock{})
	defer srv.Close()
	c, _ := client.New([]string{srv.Addr})
	defer c.Close()
	ctx := context.Background()

	first, _ := c.TryAcquire(ctx, "report", client.WithHolder("alice"))
	defer first.Release(ctx)

	_, err := c.TryAcquire(ctx, "report", client.WithHolder("bob"))
	var ae *client.APIError
	if errors.Is(err, client.ErrHeld) && errors.As(err, &ae) {
		fmt.Println("held by", ae.Holder)
	}
	// Output:
	// held by alice
}

// The plain calls do one request each and keep nothing alive.
func ExampleClient_Grant() {
	srv := clienttest.NewServer(client.SystemClock{})
	defer srv.Close()
	c, _ := client.New([]string{srv.Addr})
	defer c.Close()
	ctx := context.Background()

	lk, _ := c.Grant(ctx, "db/migrate", "ci-42", 30*time.Second, 0)
	fmt.Println(lk.Holder, lk.Token)
	ok, _ := c.Check(ctx, "db/migrate", lk.Token)
	fmt.Println("current:", ok)
	released, _ := c.Release(ctx, "db/migrate", "ci-42", lk.Token)
	fmt.Println("released:", released)
	ok, _ = c.Check(ctx, "db/migrate", lk.Token)
	fmt.Println("current:", ok)
	// Output:
	// ci-42 1
	// current: true
	// released: true
	// current: false
}
