package service

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/locktable"
)

// Sessions, multi-key acquire and lock-delay as operations of the
// service (docs/PRIMITIVES.md). A session belongs to the holder that
// opened it: the state machine refuses any other holder with no_session,
// and the HTTP adapter refuses a principal that does not own the holder
// (http_session.go), so nobody else can keep it alive, close it or take
// locks under it. Its expiry is the leader's tick, like a lease's.

// OpenSession opens a session for req.Holder with req.TTLMs.
func (s *Service) OpenSession(ctx context.Context, req api.SessionOpenRequest) (api.Session, error) {
	ttl, e := checkTTL(req.TTLMs)
	if e := firstErr(checkHolder(req.Holder), e, s.writable()); e != nil {
		return api.Session{}, s.fail(e)
	}
	return s.proposeSession(fsm.Command{Op: fsm.OpSessionOpen, Holder: req.Holder, TTL: ttl})
}

// ExtendSession renews req.Holder's session req.ID, and so every lock
// under it, for the session's TTL from now.
func (s *Service) ExtendSession(ctx context.Context, req api.SessionRequest) (api.Session, error) {
	if e := firstErr(checkHolder(req.Holder), checkSessionID(req.ID), s.writable()); e != nil {
		return api.Session{}, s.fail(e)
	}
	return s.proposeSession(fsm.Command{Op: fsm.OpSessionExtend, Holder: req.Holder, Session: req.ID})
}

// CloseSession ends req.Holder's session req.ID: every lock under it is
// released and handed to its next waiter in the same committed step. The
// answer's Locks is how many it released.
func (s *Service) CloseSession(ctx context.Context, req api.SessionRequest) (api.Session, error) {
	if e := firstErr(checkHolder(req.Holder), checkSessionID(req.ID), s.writable()); e != nil {
		return api.Session{}, s.fail(e)
	}
	out, err := s.proposeSession(fsm.Command{Op: fsm.OpSessionClose, Holder: req.Holder, Session: req.ID})
	out.RemainingMs = 0
	return out, err
}

func (s *Service) proposeSession(cmd fsm.Command) (api.Session, error) {
	res, err := s.propose(cmd)
	if err != nil {
		return api.Session{}, s.fail(proposalError(err))
	}
	if res.Err != nil {
		s.metrics.refusals.WithLabelValues(cmd.Op.String()).Inc()
		return api.Session{}, s.fail(s.commandError(res.Err, res.Now))
	}
	now := s.answerNow(res.Now)
	ss := res.Session
	rem := locktable.Duration(0)
	if ss.Expiry > now {
		rem = locktable.Duration(ss.Expiry - now)
	}
	return api.Session{ID: ss.ID, Holder: ss.Holder, TTLMs: ms(ss.TTL), RemainingMs: ms(rem), Locks: ss.Locks, Waiting: ss.Waiting}, nil
}

// AcquireAll grants every key of req.Keys to req.Holder in one command, or
// none of them.
func (s *Service) AcquireAll(ctx context.Context, req api.AcquireAllRequest) (api.AcquireAllResponse, error) {
	r, e, heldKey := s.acquireAll(req)
	if err := s.fail(e); err != nil && heldKey != "" {
		return r, &KeyedError{Err: e, Key: heldKey}
	} else if err != nil {
		return r, err
	}
	return r, nil
}

// acquireAll answers, when it is refused because a key is held, that key.
func (s *Service) acquireAll(req api.AcquireAllRequest) (api.AcquireAllResponse, *Error, string) {
	var none api.AcquireAllResponse
	ttl, e := grantTTL(req.TTLMs, req.Session)
	delay, de := checkLockDelay(req.LockDelayMs)
	if e := firstErr(checkHolder(req.Holder), e, de, checkRequestID(req.RequestID)); e != nil {
		return none, e, ""
	}
	switch {
	case len(req.Keys) == 0:
		return none, Invalid("keys", "keys is required: 1 to %d keys", api.MaxAcquireKeys), ""
	case len(req.Keys) > api.MaxAcquireKeys:
		return none, Invalid("keys", "keys has %d keys; the limit is %d", len(req.Keys), api.MaxAcquireKeys), ""
	}
	items := make([]fsm.Item, len(req.Keys))
	seen := make(map[string]bool, len(req.Keys))
	for i, k := range req.Keys {
		if e := checkKey("keys["+strconv.Itoa(i)+"]", k); e != nil {
			return none, e, ""
		}
		if seen[k] {
			return none, Invalid("keys", "keys lists %q twice", k), ""
		}
		seen[k] = true
		items[i] = fsm.Item{Key: k}
	}
	if e := s.writable(); e != nil {
		return none, e, ""
	}
	res, err := s.propose(fsm.Command{Op: fsm.OpAcquireKeys, RequestID: req.RequestID, Holder: req.Holder, TTL: ttl,
		Session: req.Session, LockDelay: delay, Items: items})
	if err != nil {
		return none, proposalError(err), ""
	}
	if res.Err != nil {
		s.metrics.refusals.WithLabelValues("acquire-all").Inc()
		ae := s.commandError(res.Err, res.Now)
		var held *locktable.HeldError
		if errors.As(res.Err, &held) {
			ae.Message = fmt.Sprintf("%q is held by another holder; no key was granted", held.Lease.Key)
			return none, ae, held.Lease.Key
		}
		return none, ae, ""
	}
	now := s.answerNow(res.Now)
	out := api.AcquireAllResponse{Locks: make([]api.Lease, len(res.Leases))}
	for i, l := range res.Leases {
		out.Locks[i] = wireLease(l, now)
		out.Locks[i].Session = req.Session
	}
	return out, nil, ""
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

func checkSessionID(id uint64) *Error {
	if id == 0 {
		return Invalid("id", "id is required: the session's id from %s", api.PathSessionOpen)
	}
	return nil
}

// sessionError maps the refusals of sessions and lock-delay; nil for any
// other error.
func sessionError(err error, now locktable.Time) *Error {
	var (
		lim   *locktable.SessionLimitError
		delay *locktable.LockDelayError
	)
	switch {
	case errors.Is(err, locktable.ErrNoSession):
		return &Error{Code: api.CodeNoSession, Message: "no such live session for this holder: it expired, was closed, or is another holder's"}
	case errors.As(err, &lim):
		return &Error{Code: api.CodeTooManySessions, Message: "too many sessions: " + lim.Error()[len("locktable: "):] + "; nothing changed"}
	case errors.As(err, &delay):
		rem := int64(0)
		if delay.Until > now {
			rem = ms(locktable.Duration(delay.Until - now))
		}
		return &Error{Code: api.CodeLockDelay, RemainingMs: &rem,
			Message: fmt.Sprintf("%q is in its lock-delay after its last lease expired; granted to nobody for %d ms more", delay.Key, rem)}
	case errors.Is(err, locktable.ErrSessionLock):
		return &Error{Code: api.CodeNotHeld, Message: "this lock is held under a session: extend the session, not the lock"}
	}
	return nil
}

// sessionAnswer completes an acquire's answer under a session: the lease
// names the session; a wait that ended because its session ended says so.
func (s *Service) sessionAnswer(req api.AcquireRequest, l api.Lease, err error) (api.Lease, error) {
	if req.Session == 0 {
		return l, err
	}
	if err == nil {
		l.Session = req.Session
		return l, nil
	}
	var e *Error
	if errors.As(err, &e) && e.Code == api.CodeHeld && req.WaitMs > 0 {
		if now, ok := s.clock.now(); ok {
			if _, alive := s.fsm.GetSession(req.Session, now); !alive {
				return l, &Error{Code: api.CodeNoSession, Message: "the session ended while waiting"}
			}
		}
	}
	return l, err
}
