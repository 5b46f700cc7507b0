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

// Sessions and multi-key acquire as operations of the service
// (docs/PRIMITIVES.md). A session belongs to the holder that opened it:
// the state machine refuses any other holder with no_session, and the
// guard refuses a principal that does not own the holder, so nobody else
// can keep it alive, close it or take locks under it. Its expiry is the
// leader's tick, like a lease's.

// OpenSession opens a session for req.Holder with req.TTLMs, counted
// against principal's quota of sessions ("": none).
func (s *Service) OpenSession(ctx context.Context, principal string, req api.SessionOpenRequest) (api.Session, error) {
	ttl, e := checkTTL(req.TTLMs)
	if e := firstErr(checkHolder(req.Holder), e, checkRequestID(req.RequestID), s.writable()); e != nil {
		return api.Session{}, s.fail(e)
	}
	release, e := s.reserve(principal, req.Holder, ask{sessions: 1})
	if e != nil {
		return api.Session{}, s.fail(e)
	}
	defer release()
	return s.proposeSession(fsm.Command{Op: fsm.OpSessionOpen, RequestID: req.RequestID, Holder: req.Holder, TTL: ttl})
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
	if e := firstErr(checkHolder(req.Holder), checkSessionID(req.ID), checkRequestID(req.RequestID), s.writable()); e != nil {
		return api.Session{}, s.fail(e)
	}
	out, err := s.proposeSession(fsm.Command{Op: fsm.OpSessionClose, RequestID: req.RequestID, Holder: req.Holder, Session: req.ID})
	out.RemainingMs = 0
	return out, err
}

func (s *Service) proposeSession(cmd fsm.Command) (api.Session, error) {
	res, err := s.propose(cmd)
	if err != nil {
		return api.Session{}, s.fail(proposalError(err))
	}
	if res.Err != nil {
		s.metrics.Refusals.WithLabelValues(cmd.Op.String()).Inc()
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
// none of them, counted against principal's quota of locks ("": none).
func (s *Service) AcquireAll(ctx context.Context, principal string, req api.AcquireAllRequest) (api.AcquireAllResponse, error) {
	r, e, heldKey := s.acquireAll(principal, req)
	if err := s.fail(e); err != nil && heldKey != "" {
		return r, &KeyedError{Err: e, Key: heldKey}
	} else if err != nil {
		return r, err
	}
	return r, nil
}

// acquireAll answers, when it is refused because a key is held, that key.
func (s *Service) acquireAll(principal string, req api.AcquireAllRequest) (api.AcquireAllResponse, *Error, string) {
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
	more := ask{}
	for _, it := range items {
		if !s.fsm.Counted(it.Key, req.Holder) {
			more.locks++
		}
	}
	release, e := s.reserve(principal, req.Holder, more)
	if e != nil {
		return none, e, ""
	}
	defer release()
	res, err := s.propose(fsm.Command{Op: fsm.OpAcquireKeys, RequestID: req.RequestID, Holder: req.Holder, TTL: ttl,
		Session: req.Session, LockDelay: delay, Items: items})
	if err != nil {
		return none, proposalError(err), ""
	}
	if res.Err != nil {
		s.metrics.Refusals.WithLabelValues("acquire-all").Inc()
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
