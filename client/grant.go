package client

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/fencelock/fencelock/api"
)

// GrantOptions are what a plain grant may ask for beyond Grant's
// arguments.
type GrantOptions struct {
	Session   uint64        // take the lock under this session (its holder's); the ttl is the session's
	LockDelay time.Duration // see WithLockDelay
	RetryFor  time.Duration // AcquireAll only: retry a refused attempt for up to this long (GrantWith waits in the queue instead)
	// GrantWith only: one of Permits permits of a semaphore, or a Mode
	// (api.ModeRead, api.ModeWrite) hold of a read/write lock.
	Permits int
	Mode    string
}

// Grant is the plain acquire call: it asks for key on behalf of holder for
// ttl. With wait 0 it tries once; with wait > 0 it queues in the key's FIFO
// for up to wait; with wait < 0, until ctx ends. However long it waits it
// keeps its place in the queue (a wait longer than the server's hour is
// sent in overlapping rounds under one request id), and a node that dies,
// freezes or stops leading meanwhile passes it on to the next with what is
// left of it. A refusal, or a wait that elapsed, matches ErrHeld; the
// *APIError names the holder in the way. A grant to a holder that already
// holds the key is a renewal: new token.
//
// Grant does not keep the lease alive; Acquire and TryAcquire do.
func (c *Client) Grant(ctx context.Context, key, holder string, ttl, wait time.Duration) (Lock, error) {
	lk, _, err := c.queue(ctx, grantCall{key: key, holder: holder, ttl: ttl, id: c.rnd.requestID()}, wait)
	return lk, err
}

// GrantWith is Grant with options: under a session, with a lock-delay, a
// semaphore's permit or a read/write hold. Like Grant it does not keep the
// lease alive.
func (c *Client) GrantWith(ctx context.Context, key, holder string, ttl, wait time.Duration, g GrantOptions) (Lock, error) {
	lk, _, err := c.queue(ctx, grantCall{key: key, holder: holder, ttl: ttl, id: c.rnd.requestID(), opts: g}, wait)
	return lk, err
}

// grantCall is one acquire request before it is sent. Every single-key
// grant of the client (Grant, GrantWith, a Lease's and a Session's
// acquire) is one of these, so the wire request is made in one place.
type grantCall struct {
	key, holder string
	ttl         time.Duration // ignored under a session: the session's TTL applies
	wait        time.Duration // 0: try once
	// id is the request id. A wait re-sent under the id it was queued
	// with keeps its place, and is answered with the grant it got
	// meanwhile rather than renewed.
	id   string
	opts GrantOptions // RetryFor does not apply
}

// request is g on the wire.
func (g grantCall) request() (api.AcquireRequest, error) {
	if g.wait < 0 {
		return api.AcquireRequest{}, invalidf("wait_ms", "wait must not be negative")
	}
	if err := firstText("key", g.key, "holder", g.holder); err != nil {
		return api.AcquireRequest{}, err
	}
	req := api.AcquireRequest{Key: g.key, Holder: g.holder, TTLMs: api.Ms(g.ttl), WaitMs: api.Ms(g.wait), RequestID: g.id,
		Session: g.opts.Session, LockDelayMs: api.Ms(g.opts.LockDelay), Permits: g.opts.Permits, Mode: g.opts.Mode}
	if g.opts.Session != 0 {
		req.TTLMs = 0
	}
	return req, nil
}

// grant sends g.
func (c *Client) grant(ctx context.Context, g grantCall) (Lock, error) {
	req, err := g.request()
	if err != nil {
		return Lock{}, err
	}
	var out api.Lease
	cl := call{method: http.MethodPost, path: api.PathAcquire, body: req, out: &out}
	if g.wait > 0 {
		// A wait re-sent to another node (its own died, froze or stopped
		// leading) asks for what is left of it: a failover does not
		// lengthen it. Past its end it still asks for a millisecond, so
		// that it stays a wait under its request id, answered with the
		// grant it may have had meanwhile.
		end := c.clock.Now().Add(g.wait)
		cl.resend = func() any {
			req.WaitMs = api.Ms(max(end.Sub(c.clock.Now()), time.Millisecond))
			return req
		}
	}
	err = c.do(ctx, cl)
	return lockOf(out), err
}

// AcquireAll grants every key to holder for ttl in one command, or none:
// no partial holds, so no lock-ordering deadlock can arise. The server
// never queues it: a key held by another holder (or in its lock-delay)
// refuses the lot with an error matching ErrHeld (ErrLockDelay). With
// g.RetryFor > 0 the client tries again, with jittered backoff on its
// clock, for up to that long. That loop is not fair (single-key waiters
// queue and go first), which is the price of never holding some keys while
// waiting for others. The locks are not kept alive: take them under a
// Session for that, or extend them. With g.Session the grants are taken
// under that session and ttl is ignored.
func (c *Client) AcquireAll(ctx context.Context, keys []string, holder string, ttl time.Duration, g GrantOptions) ([]Lock, error) {
	return c.acquireAllRetry(ctx, api.AcquireAllRequest{Keys: keys, Holder: holder, TTLMs: api.Ms(ttl),
		Session: g.Session, LockDelayMs: api.Ms(g.LockDelay)}, g.RetryFor)
}

// acquireAllRetry is acquireAll tried again on held and lock_delay for up
// to retry, 10ms apart at first, doubling to at most 500ms, each pause
// jittered down to half so that contenders do not retry in step.
func (c *Client) acquireAllRetry(ctx context.Context, req api.AcquireAllRequest, retry time.Duration) ([]Lock, error) {
	end := c.clock.Now().Add(retry)
	pause := 10 * time.Millisecond
	for {
		lks, err := c.acquireAll(ctx, req)
		if err == nil || retry <= 0 || !(errors.Is(err, ErrHeld) || errors.Is(err, ErrLockDelay)) {
			return lks, err
		}
		left := end.Sub(c.clock.Now())
		if left <= 0 {
			return nil, err
		}
		d := min(pause/2+c.rnd.n(pause/2+1), left)
		if !sleep(c.clock, d, ctx.Done()) {
			return nil, err
		}
		pause = min(2*pause, 500*time.Millisecond)
	}
}

func (c *Client) acquireAll(ctx context.Context, req api.AcquireAllRequest) ([]Lock, error) {
	for i, k := range req.Keys {
		if err := firstText("keys["+strconv.Itoa(i)+"]", k); err != nil {
			return nil, err
		}
	}
	if err := firstText("holder", req.Holder); err != nil {
		return nil, err
	}
	req.RequestID = c.rnd.requestID()
	var out api.AcquireAllResponse
	if err := c.do(ctx, call{method: http.MethodPost, path: api.PathAcquireAll, body: req, out: &out}); err != nil {
		return nil, err
	}
	lks := make([]Lock, len(out.Locks))
	for i, l := range out.Locks {
		lks[i] = lockOf(l)
	}
	return lks, nil
}
