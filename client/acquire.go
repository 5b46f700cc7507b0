package client

import (
	"context"
	"time"

	"github.com/fencelock/fencelock/client/internal/keepalive"
)

// Acquire waits in the key's FIFO queue until the lock is granted, ctx ends,
// or the WithWait bound elapses (ErrHeld), and returns the lease. A cancelled
// wait leaves the queue: the server drops a waiter whose request goes away.
// ctx bounds the wait only; the lease lives until Release or loss, and its
// Context keeps ctx's values. The lease comes with at least the
// keep-alive's failover allowance left before its Deadline: a grant that
// came back late is extended (more than once if need be) before it is
// returned, or reported lost (a *LostError).
func (c *Client) Acquire(ctx context.Context, key string, opts ...LeaseOption) (*Lease, error) {
	o := newLeaseOptions(opts)
	o.key = key
	return c.acquire(ctx, key, o, o.wait)
}

// TryAcquire is Acquire without waiting: when another holder has the key it
// returns an error matching ErrHeld at once.
func (c *Client) TryAcquire(ctx context.Context, key string, opts ...LeaseOption) (*Lease, error) {
	o := newLeaseOptions(opts)
	o.key = key
	return c.acquire(ctx, key, o, 0)
}

func (c *Client) acquire(ctx context.Context, key string, o leaseOptions, wait time.Duration) (*Lease, error) {
	if err := c.ownHolder(ctx, &o); err != nil {
		return nil, err
	}
	if o.ttl <= 0 {
		return nil, invalidf("ttl_ms", "ttl must be positive, not %v", o.ttl)
	}
	lk, sent, err := c.queue(ctx, grantCall{key: key, holder: o.holder, ttl: o.ttl, id: c.rnd.requestID(), opts: o.grant}, wait)
	if err != nil {
		if ctx.Err() != nil && wait != 0 && o.generated {
			// A grant may have crossed our cancel on the wire, unseen.
			// The holder name is ours alone, so releasing by it is safe.
			c.releaseQuietly(key, o.holder, 0)
		}
		return nil, err
	}
	return c.start(ctx, lk, o, sent)
}

// maxRedates bounds how many extensions start sends to date a grant
// afresh before it gives the lease up as lost.
const maxRedates = 3

// start turns a grant into a Lease. sent is when the grant was asked for: the
// server granted at or after it, so the lease lasts at least until sent+TTL.
//
// A lease is handed over only with at least what an extension on the
// keep-alive's cadence leaves before the give-up point: the failover
// allowance, from a TTL of about 2.3 s up (less below: BudgetFor). A grant
// older than that cadence (it waited in the queue, or a node was slow to
// answer) is extended, and dated from that extension's send. An extension
// held up too (a frozen node, left for the next) can only be dated from
// its first send, so it may leave as little again: it is extended once
// more, a few times at most, and then the lease is reported lost.
func (c *Client) start(ctx context.Context, lk Lock, o leaseOptions, sent time.Time) (*Lease, error) {
	b := keepalive.BudgetFor(o.ttl)
	for redates := 0; c.clock.Now().Sub(sent) >= b.Every; redates++ {
		if redates == maxRedates {
			c.releaseQuietly(lk.Key, lk.Holder, lk.Token)
			return nil, &LostError{Key: lk.Key, Token: lk.Token, Reason: ErrExpired}
		}
		again := c.clock.Now()
		ext, err := c.Extend(ctx, lk.Key, lk.Holder, lk.Token, o.ttl)
		if err != nil {
			c.releaseQuietly(lk.Key, lk.Holder, lk.Token)
			return nil, err
		}
		lk, sent = ext, again
	}
	l := &Lease{c: c, key: lk.Key, holder: lk.Holder, token: lk.Token, ttl: o.ttl, lock: lk}
	if l.key == "" {
		l.key = o.key
	}
	if l.holder == "" {
		l.holder = o.holder
	}
	l.keep = c.keepAlive(ctx, o.ttl, sent, "extend",
		func(ctx context.Context, addr string) (func(), error) {
			lk, err := c.extendAt(ctx, addr, l.key, l.holder, l.token, l.ttl)
			if err != nil {
				return nil, err
			}
			return func() {
				l.mu.Lock()
				l.lock = lk
				l.mu.Unlock()
			}, nil
		},
		func(reason error) error { return &LostError{Key: l.key, Token: l.token, Reason: reason} })
	return l, nil
}

// releaseQuietly gives back a grant we will not use. It is best effort: if it
// fails, the lease simply expires.
func (c *Client) releaseQuietly(key, holder string, token uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, _ = c.Release(ctx, key, holder, token)
}
