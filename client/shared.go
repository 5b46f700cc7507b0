package client

import (
	"context"

	"github.com/fencelock/fencelock/api"
)

// Semaphores and read/write locks. A permit of a semaphore, and a read or
// write hold of a read/write lock, is a Lease like any other: its own
// fencing token, kept alive and lost safely as any lease is, released by
// Release. Only the acquire differs. A key is of one kind while it has
// holders or waiters: asking for it as another kind, or for a semaphore
// with another number of permits, fails with an error matching
// ErrKindMismatch (docs/PRIMITIVES.md).
//
// One holder holds at most one permit of a key: acquiring again under the
// same holder (WithHolder) renews that permit under a new token. The
// default holder is new for each lease, so n calls take n permits.

// WithPermits makes Acquire and TryAcquire ask for one permit of the
// semaphore of n permits at key (1..api.MaxPermits). Every holder of the
// key must name the same n while the semaphore exists.
func WithPermits(n int) LeaseOption {
	return func(o *leaseOptions) { o.grant.Permits, o.grant.Mode = n, "" }
}

// WithRead makes Acquire and TryAcquire ask for a read hold of the
// read/write lock at key: shared with other readers, never with a writer,
// and queued behind a writer that asked first.
func WithRead() LeaseOption {
	return func(o *leaseOptions) { o.grant.Permits, o.grant.Mode = 0, api.ModeRead }
}

// WithWrite makes Acquire and TryAcquire ask for the write hold of the
// read/write lock at key: alone, once every reader before it has left.
func WithWrite() LeaseOption {
	return func(o *leaseOptions) { o.grant.Permits, o.grant.Mode = 0, api.ModeWrite }
}

// AcquireSemaphore waits for one of n permits of the semaphore at key, in
// FIFO order, and returns the permit's lease (Acquire with WithPermits).
func (c *Client) AcquireSemaphore(ctx context.Context, key string, n int, opts ...LeaseOption) (*Lease, error) {
	return c.Acquire(ctx, key, append(opts, WithPermits(n))...)
}

// AcquireRead waits for a read hold of the read/write lock at key (Acquire
// with WithRead).
func (c *Client) AcquireRead(ctx context.Context, key string, opts ...LeaseOption) (*Lease, error) {
	return c.Acquire(ctx, key, append(opts, WithRead())...)
}

// AcquireWrite waits for the write hold of the read/write lock at key
// (Acquire with WithWrite).
func (c *Client) AcquireWrite(ctx context.Context, key string, opts ...LeaseOption) (*Lease, error) {
	return c.Acquire(ctx, key, append(opts, WithWrite())...)
}
