package client

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"time"
)

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
	// Woken past the deadline (the process was paused): the lease is
	// already lost, and an extension sent now could not save it.
	l.mu.Lock()
	l.checkLocked(l.clock.Now())
	ended := l.err != nil
	l.mu.Unlock()
	if ended {
		return true
	}
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
