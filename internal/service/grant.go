package service

import (
	"context"
	"errors"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/locktable"
)

// grant is an acquire in the table's terms, every option checked once:
// a plain lease, one under a session or with a lock-delay, a semaphore
// permit or a read/write hold are all grants with other options, made by
// one command and answered in one way.
type grant struct {
	key, holder, requestID string
	ttl                    locktable.Duration // 0 under a session: the session's
	wait                   locktable.Duration // 0: answered at once, held or not
	session                uint64
	lockDelay              locktable.Duration
	shared                 locktable.Shared
	isShared               bool   // a semaphore permit or a read/write hold
	principal              string // the caller's ("" none): its share of a key's queue
}

// newGrant checks req, naming the field at fault.
func newGrant(req api.AcquireRequest) (grant, *Error) {
	g := grant{key: req.Key, holder: req.Holder, requestID: req.RequestID, session: req.Session}
	ttl, e := grantTTL(req.TTLMs, req.Session)
	delay, de := checkLockDelay(req.LockDelayMs)
	e = firstErr(checkKey("key", req.Key), checkHolder(req.Holder), e, de, checkRequestID(req.RequestID))
	if e == nil {
		e = checkWait(req.WaitMs)
	}
	if e == nil {
		g.shared, g.isShared, e = sharedOf(req)
	}
	g.ttl, g.lockDelay, g.wait = ttl, delay, locktable.Duration(api.Duration(req.WaitMs))
	return g, e
}

// grantTTL is a grant's ttl: ttl_ms, or, under a session, the session's
// (ttl_ms may then be left out).
func grantTTL(ttlMs int64, session uint64) (locktable.Duration, *Error) {
	if session != 0 && ttlMs == 0 {
		return 0, nil
	}
	return checkTTL(ttlMs)
}

func checkLockDelay(msv int64) (locktable.Duration, *Error) {
	if msv < 0 || msv > api.MaxLockDelay.Milliseconds() {
		return 0, Invalid("lock_delay_ms", "lock_delay_ms must be between 0 and %d", api.MaxLockDelay.Milliseconds())
	}
	return locktable.Duration(api.Duration(msv)), nil
}

// sharedOf is the multi-holder request req makes, if any.
func sharedOf(req api.AcquireRequest) (locktable.Shared, bool, *Error) {
	switch {
	case (req.Permits != 0 || req.Mode != "") && (req.Session != 0 || req.LockDelayMs != 0):
		return locktable.Shared{}, false, Invalid("permits", "a semaphore permit or a read/write hold is not taken under a session or with a lock-delay")
	case req.Permits != 0 && req.Mode != "":
		return locktable.Shared{}, false, Invalid("mode", "mode is for read/write locks; a semaphore (permits) has none")
	case req.Permits < 0 || req.Permits > api.MaxPermits:
		return locktable.Shared{}, false, Invalid("permits", "permits must be between 1 and %d", api.MaxPermits)
	case req.Permits > 0:
		return locktable.Shared{Kind: locktable.Semaphore, Permits: req.Permits}, true, nil
	case req.Mode == api.ModeRead:
		return locktable.Shared{Kind: locktable.ReadWrite}, true, nil
	case req.Mode == api.ModeWrite:
		return locktable.Shared{Kind: locktable.ReadWrite, Write: true}, true, nil
	case req.Mode != "":
		return locktable.Shared{}, false, Invalid("mode", "mode must be %q or %q", api.ModeRead, api.ModeWrite)
	}
	return locktable.Shared{}, false, nil
}

// command is the grant as a command that does not wait: refused at once
// when it cannot be granted.
func (g grant) command() fsm.Command {
	if g.isShared {
		return fsm.Command{Op: fsm.OpShared, RequestID: g.requestID, Key: g.key, Holder: g.holder, TTL: g.ttl, Shared: g.shared}
	}
	return fsm.Command{Op: fsm.OpAcquire, RequestID: g.requestID, Key: g.key, Holder: g.holder, TTL: g.ttl,
		Session: g.session, LockDelay: g.lockDelay}
}

// waitCommand is the grant as a command that queues until now+wait, with
// the leader's queue limits, so that every node refuses the same waits.
func (s *Service) waitCommand(g grant, now locktable.Time) fsm.Command {
	c := fsm.Command{Op: fsm.OpWait, RequestID: g.requestID, Now: now,
		Key: g.key, Holder: g.holder, TTL: g.ttl, Deadline: now + locktable.Time(g.wait),
		MaxKeyWaiters: s.cfg.MaxWaitersPerKey, MaxWaiters: s.cfg.MaxWaiters}
	if g.principal != "" {
		c.MaxOwnerKeyWaiters = s.cfg.QuotaKeyWaiters
	}
	if g.isShared {
		c.Op, c.Shared = fsm.OpShared, g.shared
	} else {
		c.Session, c.LockDelay = g.session, g.lockDelay
	}
	return c
}

// Acquire grants req.Key to req.Holder if it is free. With WaitMs > 0 it
// queues in the key's FIFO and answers when the grant or the end of the
// wait is committed (acquireWait). principal is the caller's, whose
// quotas it counts against; "" is none (ACLs off, or an in-process
// caller): no quota.
func (s *Service) Acquire(ctx context.Context, principal string, req api.AcquireRequest) (api.Lease, error) {
	g, e := newGrant(req)
	var l api.Lease
	if e == nil {
		l, e = s.acquire(ctx, principal, g)
	}
	return s.answerGrant(g, l, s.fail(e))
}

func (s *Service) acquire(ctx context.Context, principal string, g grant) (api.Lease, *Error) {
	if e := s.writable(); e != nil {
		return api.Lease{}, e
	}
	release, e := s.reserve(principal, g.holder, s.grantAsk(g))
	if e != nil {
		return api.Lease{}, e
	}
	defer release()
	if g.wait > 0 {
		g.principal = principal
		return s.acquireWait(ctx, g, release)
	}
	if g.isShared {
		// Remembered like a wait: its grant must not be taken for an
		// orphan's (an exclusive try-once never is).
		defer s.waiters.answering(g.key, g.holder)()
	}
	l, _, e := s.proposeLease(g.command(), "acquire")
	return l, e
}

// answerGrant completes a grant's answer: the session it was taken under,
// the kind of lease it is (a hand-off's event carries neither) and a
// semaphore permit's slot; a wait that ended because its session ended
// says so.
func (s *Service) answerGrant(g grant, l api.Lease, err error) (api.Lease, error) {
	if g.session != 0 {
		if err == nil {
			l.Session = g.session
		}
		var e *Error
		if errors.As(err, &e) && e.Code == api.CodeHeld && g.wait > 0 {
			if now, ok := s.clock.now(); ok {
				if _, alive := s.fsm.GetSession(g.session, now); !alive {
					return l, &Error{Code: api.CodeNoSession, Message: "the session ended while waiting"}
				}
			}
		}
	}
	if !g.isShared || l.Token == 0 {
		return l, err
	}
	sh := g.shared
	w := wireLease(locktable.Lease{Kind: sh.Kind, Permits: sh.Permits, Write: sh.Write}, 0)
	l.Kind, l.Permits, l.Mode = w.Kind, w.Permits, w.Mode
	if sh.Kind == locktable.Semaphore && l.Slot == 0 {
		if now, ok := s.clock.now(); ok {
			if cur, ok := s.fsm.LeaseOf(l.Key, l.Holder, now); ok && cur.Token == l.Token {
				l.Slot = cur.Slot
			}
		}
	}
	return l, err
}
