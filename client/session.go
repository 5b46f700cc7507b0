package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/client/internal/keepalive"
)

// Sessions (docs/PRIMITIVES.md, "Sessions"), in the style of etcd's
// concurrency.Session: one lease of the server's that keeps any number of
// locks alive with one keep-alive goroutine.

// Sentinels of sessions and lock-delay. Wire codes no_session,
// too_many_sessions and lock_delay.
var (
	// ErrNoSession: the session named is not alive for this holder on the
	// server (it expired, was closed, or is another holder's).
	ErrNoSession = errors.New("fencelock: no such live session")
	// ErrTooManySessions: a session limit was reached (api.MaxSessions...).
	ErrTooManySessions = errors.New("fencelock: too many sessions")
	// ErrLockDelay: the key is in its lock-delay after a lease expired;
	// APIError.Remaining says for how long.
	ErrLockDelay = errors.New("fencelock: key in lock-delay")
	// ErrSessionClosed: the session was ended by Close.
	ErrSessionClosed = errors.New("fencelock: session closed")
	// ErrSessionLost: the client can no longer prove the session alive.
	ErrSessionLost = errors.New("fencelock: session lost")
)

// sessionSentinel maps the wire codes of sessions; nil for the others.
func sessionSentinel(code string) error {
	switch code {
	case api.CodeNoSession:
		return ErrNoSession
	case api.CodeTooManySessions:
		return ErrTooManySessions
	case api.CodeLockDelay:
		return ErrLockDelay
	}
	return nil
}

// SessionLostError says why a Session was lost. It matches ErrSessionLost,
// ErrLeaseLost (each lock under it is lost too) and Reason.
type SessionLostError struct {
	ID     uint64
	Reason error // ErrExpired, or the error of the last failed extension
}

func (e *SessionLostError) Error() string {
	return fmt.Sprintf("fencelock: session %d lost: %v", e.ID, e.Reason)
}

func (e *SessionLostError) Unwrap() []error { return []error{ErrSessionLost, ErrLeaseLost, e.Reason} }

type sessionOptions struct {
	ttl       time.Duration
	holder    string
	generated bool
}

// SessionOption configures NewSession.
type SessionOption func(*sessionOptions)

// WithSessionTTL sets the session's TTL (default DefaultTTL; the server
// accepts 100ms to 24h). The session extends and is lost as a Lease is:
// about every TTL/3 (sooner below 2.7 s), and lost 0.89×TTL after the send
// time of the last confirmed extension.
func WithSessionTTL(ttl time.Duration) SessionOption {
	return func(o *sessionOptions) { o.ttl = ttl }
}

// WithSessionHolder names the session's holder, which every lock under it
// carries (default DefaultHolder(), new for each session).
func WithSessionHolder(holder string) SessionOption {
	return func(o *sessionOptions) { o.holder = holder }
}

// Session is a server-side session kept alive by exactly one goroutine.
// Locks taken under it (Acquire, TryAcquire, AcquireAll) need no keep-alive
// of their own: the session's renews them all, and they end with it.
// When the session is lost (no extension confirmed by its Deadline,
// 0.89×TTL after the send of the last confirmed one) or closed, Done is closed, Err says why, and
// every lock's Context ends with the same cause.
type Session struct {
	c      *Client
	keep   *keepalive.Keeper
	id     uint64
	holder string
	ttl    time.Duration
}

// NewSession opens a session on the server and starts its keep-alive.
func NewSession(ctx context.Context, c *Client, opts ...SessionOption) (*Session, error) {
	o := sessionOptions{ttl: DefaultTTL}
	for _, f := range opts {
		f(&o)
	}
	if o.holder == "" {
		o.holder, o.generated = DefaultHolder(), true
	}
	lo := leaseOptions{holder: o.holder, generated: o.generated}
	if err := c.ownHolder(ctx, &lo); err != nil {
		return nil, err
	}
	if o.ttl < api.MinTTL || o.ttl > api.MaxTTL {
		return nil, invalidf("ttl_ms", "session ttl must be between %v and %v, not %v", api.MinTTL, api.MaxTTL, o.ttl)
	}
	sent := c.clock.Now()
	out, err := c.OpenSession(ctx, lo.holder, o.ttl)
	if err != nil {
		return nil, err
	}
	s := &Session{c: c, id: out.ID, holder: lo.holder, ttl: o.ttl}
	s.keep = c.keepAlive(ctx, o.ttl, sent, "the session's extend",
		func(ctx context.Context, addr string) (func(), error) {
			err := c.do(ctx, call{at: addr, method: http.MethodPost, path: api.PathSessionExtend,
				body: api.SessionRequest{ID: s.id, Holder: s.holder}, out: &api.Session{}})
			return func() {}, err
		},
		func(reason error) error { return &SessionLostError{ID: s.id, Reason: reason} })
	s.keep.Check() // an open answered after the give-up point is already lost
	return s, nil
}

// ID is the server's id of the session.
func (s *Session) ID() uint64 { return s.id }

// Holder is the holder every lock under the session carries.
func (s *Session) Holder() string { return s.holder }

// TTL is the session's TTL.
func (s *Session) TTL() time.Duration { return s.ttl }

// Done is closed when the session ends: lost, or closed.
func (s *Session) Done() <-chan struct{} { return s.keep.Done() }

// Context is cancelled when the session ends, with Err as its cause.
func (s *Session) Context() context.Context { return s.keep.Context() }

// Err is nil while the session is alive; afterwards ErrSessionClosed or a
// *SessionLostError.
func (s *Session) Err() error { return s.keep.Err() }

// Deadline is when the session will be declared lost unless an extension
// is confirmed first: 0.89×TTL after the send time of the last confirmed
// one (see Lease.Deadline).
func (s *Session) Deadline() time.Time { return s.keep.Deadline() }

// StopBy is when everything done under the session's locks must have
// stopped: TTL less TTL/100 after the send time of the last confirmed
// extension (see Lease.StopBy).
func (s *Session) StopBy() time.Time { return s.keep.StopBy() }

// Close stops the keep-alive, waits for its goroutine and ends the session
// on the server, which releases every lock under it and hands each key to
// its next waiter in one step. It returns the loss error if the session
// had been lost (the close is still sent); calls after the first return nil.
func (s *Session) Close(ctx context.Context) error {
	lost, first := s.keep.Stop(ErrSessionClosed)
	if !first {
		return nil
	}
	_, err := s.c.CloseSession(ctx, s.id, s.holder)
	switch {
	case lost != nil:
		return lost
	case err != nil:
		return err
	}
	return nil
}

// SessionLock is a lock held under a Session. It has no goroutine: its
// Context ends when it is released or when the session ends, with the
// session's cause (ErrSessionClosed, a *SessionLostError).
type SessionLock struct {
	s      *Session
	lock   Lock
	ctx    context.Context
	cancel context.CancelCauseFunc
	once   sync.Once
}

// Key is the locked key.
func (l *SessionLock) Key() string { return l.lock.Key }

// Token is the lock's fencing token; carry it to the resource.
func (l *SessionLock) Token() uint64 { return l.lock.Token }

// Lock is the server's account of the grant.
func (l *SessionLock) Lock() Lock { return l.lock }

// Session is the session the lock is held under.
func (l *SessionLock) Session() *Session { return l.s }

// Context ends when the lock is released (ErrReleased) or its session ends.
func (l *SessionLock) Context() context.Context { return l.ctx }

// Done is Context().Done().
func (l *SessionLock) Done() <-chan struct{} { return l.ctx.Done() }

// Release gives the lock back, leaving the session and its other locks.
// It matches ErrNotHeld when the server no longer had it.
func (l *SessionLock) Release(ctx context.Context) error {
	first := false
	l.once.Do(func() { first = true; l.cancel(ErrReleased) })
	if !first {
		return nil
	}
	ok, err := l.s.c.Release(ctx, l.lock.Key, l.s.holder, l.lock.Token)
	switch {
	case err != nil:
		return err
	case !ok:
		return fmt.Errorf("%w: the server had no live lock on %q with token %d to release", ErrNotHeld, l.lock.Key, l.lock.Token)
	}
	return nil
}

func (s *Session) lockOf(lk Lock) *SessionLock {
	l := &SessionLock{s: s, lock: lk}
	l.ctx, l.cancel = context.WithCancelCause(s.keep.Context())
	return l
}

// alive refuses to take locks under a session that has ended.
func (s *Session) alive() error {
	if err := s.Err(); err != nil {
		return err
	}
	return nil
}

// TryAcquire takes key under the session, or fails at once with an error
// matching ErrHeld (or ErrLockDelay). Of opts, WithLockDelay applies;
// TTL and holder are the session's.
func (s *Session) TryAcquire(ctx context.Context, key string, opts ...LeaseOption) (*SessionLock, error) {
	return s.acquire(ctx, key, newLeaseOptions(opts), 0)
}

// Acquire waits in key's FIFO queue, under the session, until the lock is
// granted, ctx ends, the WithWait bound elapses (ErrHeld) or the session
// ends (ErrNoSession). A cancelled wait leaves the queue.
func (s *Session) Acquire(ctx context.Context, key string, opts ...LeaseOption) (*SessionLock, error) {
	o := newLeaseOptions(opts)
	return s.acquire(ctx, key, o, o.wait)
}

func (s *Session) acquire(ctx context.Context, key string, o leaseOptions, wait time.Duration) (*SessionLock, error) {
	if err := s.alive(); err != nil {
		return nil, err
	}
	// The wait ends with the session too.
	wctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	sctx := s.keep.Context()
	unhook := context.AfterFunc(sctx, func() { stop(context.Cause(sctx)) })
	defer unhook()
	lk, _, err := s.c.queue(wctx, grantCall{key: key, holder: s.holder, id: s.c.rnd.requestID(),
		opts: GrantOptions{Session: s.id, LockDelay: o.grant.LockDelay}}, wait)
	if err == nil {
		if serr := s.alive(); serr != nil {
			return nil, serr // the session ended as the grant came: it went with it
		}
		return s.lockOf(lk), nil
	}
	if wctx.Err() != nil {
		if wait != 0 {
			// A grant may have crossed our cancel; the holder is the
			// session's alone, so releasing by it is safe.
			s.c.releaseQuietly(key, s.holder, 0)
		}
		if cause := context.Cause(wctx); sctx.Err() != nil {
			return nil, cause
		}
	}
	return nil, err
}

// AcquireAll takes every key under the session in one command, or none: a
// key held by another holder refuses the lot with ErrHeld and nothing is
// granted. It tries once; with WithWait(d) it retries for up to d (see
// Client.AcquireAll for why it retries rather than queues). Of opts,
// WithLockDelay and WithWait apply.
func (s *Session) AcquireAll(ctx context.Context, keys []string, opts ...LeaseOption) ([]*SessionLock, error) {
	if err := s.alive(); err != nil {
		return nil, err
	}
	o := newLeaseOptions(opts)
	wctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	sctx := s.keep.Context()
	defer context.AfterFunc(sctx, func() { stop(context.Cause(sctx)) })()
	lks, err := s.c.acquireAllRetry(wctx, api.AcquireAllRequest{Keys: keys, Holder: s.holder, Session: s.id,
		LockDelayMs: api.Ms(o.grant.LockDelay)}, max(o.wait, 0))
	if err != nil && sctx.Err() != nil {
		return nil, context.Cause(sctx)
	}
	if err != nil {
		return nil, err
	}
	out := make([]*SessionLock, len(lks))
	for i, lk := range lks {
		out[i] = s.lockOf(lk)
	}
	return out, nil
}

// SessionInfo is the server's account of a session.
type SessionInfo struct {
	ID        uint64
	Holder    string
	TTL       time.Duration
	Remaining time.Duration // on cluster time, when the answer was produced
	Locks     int           // locks held under it (after a close: released)
	Waiting   int           // queue places under it
}

func sessionInfoOf(w api.Session) SessionInfo {
	return SessionInfo{ID: w.ID, Holder: w.Holder, TTL: api.Duration(w.TTLMs), Remaining: api.Duration(w.RemainingMs),
		Locks: w.Locks, Waiting: w.Waiting}
}

// OpenSession is the plain session-open call; nothing keeps the session
// alive (NewSession does). Use it from scripts and tools.
func (c *Client) OpenSession(ctx context.Context, holder string, ttl time.Duration) (SessionInfo, error) {
	if err := firstText("holder", holder); err != nil {
		return SessionInfo{}, err
	}
	var out api.Session
	err := c.do(ctx, call{method: http.MethodPost, path: api.PathSessionOpen,
		body: api.SessionOpenRequest{Holder: holder, TTLMs: api.Ms(ttl), RequestID: c.rnd.requestID()}, out: &out})
	return sessionInfoOf(out), err
}

// ExtendSession renews holder's session id, and every lock under it, for
// the session's TTL. It matches ErrNoSession when the session has ended.
func (c *Client) ExtendSession(ctx context.Context, id uint64, holder string) (SessionInfo, error) {
	var out api.Session
	err := c.do(ctx, call{method: http.MethodPost, path: api.PathSessionExtend,
		body: api.SessionRequest{ID: id, Holder: holder}, out: &out})
	return sessionInfoOf(out), err
}

// CloseSession ends holder's session id, releasing every lock under it.
func (c *Client) CloseSession(ctx context.Context, id uint64, holder string) (SessionInfo, error) {
	var out api.Session
	err := c.do(ctx, call{method: http.MethodPost, path: api.PathSessionClose,
		body: api.SessionRequest{ID: id, Holder: holder, RequestID: c.rnd.requestID()}, out: &out})
	return sessionInfoOf(out), err
}
