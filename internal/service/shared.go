package service

import (
	"errors"
	"strconv"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/locktable"
)

// Semaphores and read/write locks in the service. They are grants with
// an option (AcquireRequest.Permits or Mode), and so share
// Acquire's validation, its authorization (lock on the key, the holder
// the caller's own) and its wait machinery: only the command differs,
// OpShared instead of OpAcquire or OpWait. Extend, release, check and list need
// nothing of their own: the table answers them per (key, holder, token)
// whatever the key's kind.

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
