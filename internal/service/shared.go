package service

import (
	"errors"
	"strconv"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/locktable"
)

// Semaphores and read/write locks in the service. They ride on Acquire
// (AcquireRequest.Permits or Mode), and so on its validation, its
// authorization (lock on the key, the holder the caller's own) and its
// wait machinery (service_wait.go): only the command differs, OpShared
// instead of OpAcquire or OpWait. Extend, release, check and list need
// nothing of their own: the table answers them per (key, holder, token)
// whatever the key's kind.

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

// acquireCommand is the command of an acquire that does not wait.
func acquireCommand(req api.AcquireRequest, ttl, delay locktable.Duration) fsm.Command {
	if sh, ok, _ := sharedOf(req); ok { // Deadline 0: refused at once when it cannot be granted
		return fsm.Command{Op: fsm.OpShared, RequestID: req.RequestID, Key: req.Key, Holder: req.Holder, TTL: ttl, Shared: sh}
	}
	return fsm.Command{Op: fsm.OpAcquire, RequestID: req.RequestID, Key: req.Key, Holder: req.Holder, TTL: ttl,
		Session: req.Session, LockDelay: delay}
}

// waitCommand is the command of an acquire that queues until now+wait.
func (s *Service) waitCommand(req api.AcquireRequest, ttl locktable.Duration, now locktable.Time, wait locktable.Duration) fsm.Command {
	c := fsm.Command{Op: fsm.OpWait, RequestID: req.RequestID, Now: now,
		Key: req.Key, Holder: req.Holder, TTL: ttl, Deadline: now + locktable.Time(wait),
		MaxKeyWaiters: s.cfg.MaxWaitersPerKey, MaxWaiters: s.cfg.MaxWaiters}
	if sh, ok, _ := sharedOf(req); ok {
		c.Op, c.Shared = fsm.OpShared, sh
	} else {
		c.Session, c.LockDelay = req.Session, locktable.Duration(api.Duration(req.LockDelayMs))
	}
	return c
}

// decorate gives an answered grant the kind of the request that got it,
// and a semaphore permit its slot (a hand-off's event carries neither).
func (s *Service) decorate(l api.Lease, req api.AcquireRequest) api.Lease {
	sh, ok, _ := sharedOf(req)
	if !ok || l.Token == 0 {
		return l
	}
	w := wireLease(locktable.Lease{Kind: sh.Kind, Permits: sh.Permits, Write: sh.Write}, 0)
	l.Kind, l.Permits, l.Mode = w.Kind, w.Permits, w.Mode
	if sh.Kind == locktable.Semaphore && l.Slot == 0 {
		if now, ok := s.clock.now(); ok {
			if cur, ok := s.fsm.LeaseOf(l.Key, l.Holder, now); ok && cur.Token == l.Token {
				l.Slot = cur.Slot
			}
		}
	}
	return l
}

// wireKind is the kind fields of l as the API carries them.
func wireKind(l locktable.Lease) (kind string, permits int, mode string) {
	switch l.Kind {
	case locktable.Semaphore:
		return api.KindSemaphore, l.Permits, ""
	case locktable.ReadWrite:
		if l.Write {
			return api.KindRWLock, 0, api.ModeWrite
		}
		return api.KindRWLock, 0, api.ModeRead
	}
	return "", 0, ""
}

// kindMismatch is the refusal of a request of the wrong kind for its key.
func kindMismatch(err error) (*Error, bool) {
	var km *locktable.KindMismatchError
	if !errors.As(err, &km) {
		return nil, false
	}
	kind := api.KindExclusive
	switch km.Kind {
	case locktable.Semaphore:
		kind = api.KindSemaphore
	case locktable.ReadWrite:
		kind = api.KindRWLock
	}
	e := &Error{Code: api.CodeKindMismatch, Kind: kind, Permits: km.Permits,
		Message: "key is a " + kind + " while it has holders or waiters; ask for it as one"}
	if km.Kind == locktable.Semaphore {
		e.Message = "key is a semaphore of " + strconv.Itoa(km.Permits) + " permits while it has holders or waiters; ask with that limit"
	}
	return e, true
}

// withHolders adds every live holder to l, the answer of Get on a
// multi-holder key.
func (s *Service) withHolders(l api.Lease, key string, now locktable.Time) api.Lease {
	if l.Kind == "" {
		return l
	}
	for _, h := range s.fsm.Holders(key, now) {
		l.Holders = append(l.Holders, wireLease(h, now))
	}
	return l
}
