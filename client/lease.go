package client

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"sync"
	"time"
)

// Lease is a held lock that keeps itself alive. One goroutine per Lease
// extends it about every TTL/3 (with jitter), keeping its token. When no
// extension has been confirmed by TTL/2 after the send time of the last
// confirmed one, measured on the client's clock, the lease is lost: Done is
// closed and Err says why. The server cannot have handed the key to anyone
// else before TTL after that send, so whoever watches Done has at least TTL/2
// to stop using the lease (DESIGN.md §4).
//
// Work done under a lease should carry Token to the resource, whose fence
// refuses stale tokens: a process can be paused at any instruction, even
// right after checking Done.
type Lease struct {
	c           *Client
	clock       Clock
	key, holder string
	token       uint64
	ttl         time.Duration

	ctx    context.Context
	cancel context.CancelCauseFunc
	done   chan struct{} // closed when the goroutine has returned

	mu       sync.Mutex
	lastSent time.Time // send time of the last confirmed grant or extension
	lock     Lock      // the server's last answer
	timer    Timer     // calls expire at lastSent + ttl/2
	lastErr  error     // the last transient failure since the last confirmation
	err      error     // ErrReleased or *LostError once the lease has ended
	released bool
}

// Acquire waits in the key's FIFO queue until the lock is granted, ctx ends,
// or the WithWait bound elapses (ErrHeld), and returns the lease. A cancelled
// wait leaves the queue: the server drops a waiter whose request goes away.
// ctx bounds the wait only; the lease lives until Release or loss, and its
// Context keeps ctx's values.
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
	if o.ttl <= 0 {
		return nil, invalidf("ttl_ms", "ttl must be positive, not %v", o.ttl)
	}
	var end time.Time
	if wait > 0 {
		end = c.clock.Now().Add(wait)
	}
	for {
		var round time.Duration
		switch {
		case wait < 0:
			round = maxWaitRound
		case wait > 0:
			round = min(end.Sub(c.clock.Now()), maxWaitRound)
			round = max(round, 0)
		}
		sent := c.clock.Now()
		lk, err := c.Grant(ctx, key, o.holder, o.ttl, round)
		if err == nil {
			return c.start(ctx, lk, o, sent)
		}
		if ctx.Err() != nil {
			if round > 0 && o.generated {
				// The grant may have crossed our cancel on the wire. The
				// holder name is ours alone, so releasing by it is safe.
				c.releaseQuietly(key, o.holder, 0)
			}
			return nil, err
		}
		if !errors.Is(err, ErrHeld) || wait == 0 || (wait > 0 && !c.clock.Now().Before(end)) {
			return nil, err
		}
	}
}

// start turns a grant into a Lease. sent is when the grant was asked for: the
// server granted at or after it, so the lease lasts at least until sent+TTL.
func (c *Client) start(ctx context.Context, lk Lock, o leaseOptions, sent time.Time) (*Lease, error) {
	if c.clock.Now().Sub(sent) >= o.ttl/3 {
		// A grant that waited in the queue can only be dated from when we
		// asked, which may be long ago; an extension dates it afresh.
		again := c.clock.Now()
		ext, err := c.Extend(ctx, lk.Key, lk.Holder, lk.Token, o.ttl)
		if err != nil {
			c.releaseQuietly(lk.Key, lk.Holder, lk.Token)
			return nil, err
		}
		lk, sent = ext, again
		if c.clock.Now().Sub(sent) >= o.ttl/2 {
			c.releaseQuietly(lk.Key, lk.Holder, lk.Token)
			return nil, &LostError{Key: lk.Key, Token: lk.Token, Reason: ErrExpired}
		}
	}
	l := &Lease{
		c:        c,
		clock:    c.clock,
		key:      lk.Key,
		holder:   lk.Holder,
		token:    lk.Token,
		ttl:      o.ttl,
		done:     make(chan struct{}),
		lastSent: sent,
		lock:     lk,
	}
	if l.key == "" {
		l.key = o.key
	}
	if l.holder == "" {
		l.holder = o.holder
	}
	l.ctx, l.cancel = context.WithCancelCause(context.WithoutCancel(ctx))
	l.mu.Lock()
	l.timer = l.clock.AfterFunc(l.deadlineLocked().Sub(c.clock.Now()), l.expire)
	l.mu.Unlock()
	go l.run()
	return l, nil
}

// releaseQuietly gives back a grant we will not use. It is best effort: if it
// fails, the lease simply expires.
func (c *Client) releaseQuietly(key, holder string, token uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, _ = c.Release(ctx, key, holder, token)
}

// Key returns the locked key.
func (l *Lease) Key() string { return l.key }

// Holder returns the holder name the lease was granted to.
func (l *Lease) Holder() string { return l.holder }

// Token returns the fencing token. Extensions keep it.
func (l *Lease) Token() uint64 { return l.token }

// TTL returns the lease TTL.
func (l *Lease) TTL() time.Duration { return l.ttl }

// Done is closed when the lease ends: lost, or released.
func (l *Lease) Done() <-chan struct{} { return l.ctx.Done() }

// Context is cancelled when the lease ends, with Err as its cause
// (context.Cause). It carries the values of the ctx given to Acquire.
func (l *Lease) Context() context.Context { return l.ctx }

// Err is nil while the lease is held. Afterwards it is ErrReleased, or a
// *LostError matching ErrLeaseLost and the reason: ErrExpired (no extension
// was confirmed in time, e.g. the process was paused), ErrUnreachable or
// ErrUnavailable (the extensions that were tried failed), or ErrNotHeld (the
// server refused an extension: the lease had already ended there).
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.checkLocked(l.clock.Now())
	return l.err
}

// Deadline is when the lease will be declared lost unless an extension is
// confirmed first: TTL/2 after the send time of the last confirmed one.
func (l *Lease) Deadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadlineLocked()
}

// HeldUntil is the earliest instant at which the server can consider the
// lease expired and grant the key to someone else: TTL after the send time
// of the last confirmed grant or extension, on the client's clock (assuming
// client and server clocks run at about the same rate). Anything still
// running under the lease must be stopped before then.
func (l *Lease) HeldUntil() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastSent.Add(l.ttl)
}

// Lock returns the server's last account of the lease.
func (l *Lease) Lock() Lock {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lock
}

// Release stops the keep-alive, waits for its goroutine and gives the lock
// back. It returns nil when the server released it; the loss error when the
// lease had already been lost (the release is still sent, in case the server
// still holds it); an error matching ErrNotHeld when the server no longer had
// it. Calls after the first return nil.
func (l *Lease) Release(ctx context.Context) error {
	l.mu.Lock()
	if l.released {
		l.mu.Unlock()
		<-l.done
		return nil
	}
	l.released = true
	l.checkLocked(l.clock.Now())
	lost := l.err
	if lost == nil {
		l.endLocked(ErrReleased)
	}
	l.mu.Unlock()
	<-l.done

	ok, err := l.c.Release(ctx, l.key, l.holder, l.token)
	switch {
	case lost != nil:
		return lost
	case err != nil:
		return err
	case !ok:
		return fmt.Errorf("%w: the server had no live lease on %q with token %d to release", ErrNotHeld, l.key, l.token)
	}
	return nil
}

func (l *Lease) deadlineLocked() time.Time { return l.lastSent.Add(l.ttl / 2) }

// expire runs at the deadline.
func (l *Lease) expire() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.checkLocked(l.clock.Now())
}

// checkLocked declares the lease lost once now has reached the deadline.
func (l *Lease) checkLocked(now time.Time) {
	if l.err != nil || now.Before(l.deadlineLocked()) {
		return
	}
	reason := ErrExpired
	if l.lastErr != nil {
		reason = l.lastErr
	}
	l.endLocked(&LostError{Key: l.key, Token: l.token, Reason: reason})
}

func (l *Lease) endLocked(err error) {
	l.err = err
	l.timer.Stop()
	l.cancel(err)
}

// run is the lease's one goroutine: extend at about TTL/3 after each
// confirmed send, retry transient failures until the deadline.
func (l *Lease) run() {
	defer close(l.done)
	for {
		l.mu.Lock()
		next := l.lastSent.Add(l.interval())
		l.mu.Unlock()
		if !sleep(l.clock, next.Sub(l.clock.Now()), l.ctx.Done()) {
			return
		}
		for !l.extendOnce() {
			if !sleep(l.clock, l.retryDelay(), l.ctx.Done()) {
				return
			}
		}
		if l.ctx.Err() != nil {
			return
		}
	}
}

// interval is TTL/3 give or take 10%, so that many clients started together
// do not extend in lockstep.
func (l *Lease) interval() time.Duration {
	third := l.ttl / 3
	return third - third/10 + mrand.N(third/5+1)
}

// retryDelay spaces retries of a failed extension: about TTL/15, so several
// fit between TTL/3 and the deadline at TTL/2.
func (l *Lease) retryDelay() time.Duration {
	d := l.ttl / 15
	return d/2 + mrand.N(d/2+1)
}

// extendOnce sends one extension and records its outcome. It reports false
// after a failure worth retrying.
func (l *Lease) extendOnce() bool {
	timeout := max(l.ttl/6, time.Millisecond)
	actx, cancel := context.WithCancelCause(l.ctx)
	t := l.clock.AfterFunc(timeout, func() {
		cancel(fmt.Errorf("%w: no answer to extend within %v", ErrUnreachable, timeout))
	})
	sent := l.clock.Now()
	lk, err := l.c.extend(actx, l.key, l.holder, l.token, l.ttl, true)
	t.Stop()
	cancel(nil)

	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return true // ended while the request was out
	}
	now := l.clock.Now()
	switch {
	case err == nil:
		l.checkLocked(now) // a confirmation after the deadline is too late
		if l.err != nil {
			return true
		}
		l.lastSent, l.lock, l.lastErr = sent, lk, nil
		l.timer.Stop()
		l.timer = l.clock.AfterFunc(l.deadlineLocked().Sub(now), l.expire)
		return true
	case errors.Is(err, ErrUnreachable), errors.Is(err, ErrUnavailable), errors.Is(err, ErrInternal):
		l.lastErr = err
		l.checkLocked(now)
		return l.err != nil
	default:
		l.endLocked(&LostError{Key: l.key, Token: l.token, Reason: err})
		return true
	}
}
