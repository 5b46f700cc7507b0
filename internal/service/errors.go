package service

import (
	"errors"
	"fmt"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/locktable"
	"github.com/fencelock/fencelock/internal/replica"
)

// Error is how every operation of the service refuses or fails: the body
// a transport answers (api.Error) with the status api.Status(Code).
// Operations return it as their error; use errors.As to get it.
type Error api.Error

func (e *Error) Error() string { return e.Message }

// Wire is e as the api package declares it.
func (e *Error) Wire() *api.Error { return (*api.Error)(e) }

// Status is the HTTP status e is answered with.
func (e *Error) Status() int { return api.Status(e.Code) }

// AsError is err as an *Error; anything else is an internal error.
func AsError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Code: api.CodeInternal, Message: "internal error"}
}

// NewError is an *Error with code and a message.
func NewError(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Invalid is invalid_argument naming the field at fault.
func Invalid(field, format string, args ...any) *Error {
	return &Error{Code: api.CodeInvalid, Field: field, Message: fmt.Sprintf(format, args...)}
}

// Unavailable is a 503 that says why.
func Unavailable(msg string) *Error {
	return &Error{Code: api.CodeUnavailable, Message: msg}
}

// Complete is e as a transport answers it: a not_leader that names no
// leader yet is completed with where to go (removed, on a removed node).
func (s *Service) Complete(e *Error) *Error { return (*Error)(s.cluster.Redirect(e.Wire())) }

// fail is how an operation hands its *Error back as an error: nil stays
// nil, and a not_leader that names no leader yet is completed with where
// to go.
func (s *Service) fail(e *Error) error {
	if e == nil {
		return nil
	}
	return s.Complete(e)
}

// proposalError maps a failed proposal to a 503.
func proposalError(err error) *Error {
	var se *replica.StorageError
	if errors.As(err, &se) {
		return storageError(se)
	}
	if errors.Is(err, replica.ErrNotLeader) {
		return &Error{Code: api.CodeNotLeader, Message: "this node is not the leader"}
	}
	return Unavailable(err.Error())
}

// storageError answers a write the log could not make durable: 507
// no_space for a full disk, 503 too_many_open_files for exhausted file
// descriptors. Nothing was committed.
func storageError(se *replica.StorageError) *Error {
	if se.NoSpace() {
		return &Error{Code: api.CodeNoSpace, Message: se.Error()}
	}
	return &Error{Code: api.CodeTooManyOpenFiles, Message: se.Error()}
}

// commandError maps a refusal in a Result. Input errors cannot normally
// happen (operations validate first); they still answer invalid_argument.
func (s *Service) commandError(err error, now locktable.Time) *Error {
	var (
		held *locktable.HeldError
		in   *locktable.InputError
		full *locktable.QueueFullError
	)
	if e := sessionError(err, now); e != nil {
		return e
	}
	if e, ok := kindMismatch(err); ok {
		return e
	}
	switch {
	case errors.As(err, &held):
		rem := ms(held.Lease.Remaining(now))
		return &Error{Code: api.CodeHeld, Holder: held.Lease.Holder, RemainingMs: &rem,
			Message: "held by another holder"}
	case errors.Is(err, locktable.ErrNotHeld):
		return &Error{Code: api.CodeNotHeld, Message: "not the live holder of this token"}
	case errors.As(err, &full):
		switch full.Scope {
		case "owner":
			return &Error{Code: api.CodeQuotaExceeded, Quota: api.QuotaKeyWaiters,
				Message: quotaMessage(full.Owner, api.QuotaKeyWaiters, full.Limit, full.Limit)}
		case "key":
			return &Error{Code: api.CodeTooManyWaiters,
				Message: fmt.Sprintf("too many waiters: this key's queue is at its limit of %d; try again later", full.Limit)}
		}
		return &Error{Code: api.CodeTooManyWaiters,
			Message: fmt.Sprintf("too many waiters: the server's queues are at their limit of %d in all; try again later", full.Limit)}
	case errors.Is(err, fsm.ErrClockStep):
		// The leader's stamp was out of bounds; apply has resumed its
		// clock from the applied time, so the same request will do.
		return Unavailable("the cluster clock was resynchronised; retry")
	case errors.As(err, &in):
		field := in.Field
		if field == "ttl" {
			field = "ttl_ms"
		}
		return Invalid(field, "%s", in.Error())
	}
	s.log.Error("command failed", "err", err)
	return &Error{Code: api.CodeInternal, Message: "internal error"}
}

// Denied is permission_denied.
func Denied(format string, args ...any) *Error {
	return NewError(api.CodePermissionDenied, "permission denied: "+format, args...)
}

// Unauthenticated is unauthenticated: no credential, or one nobody has.
func Unauthenticated(format string, args ...any) *Error {
	return NewError(api.CodeUnauthenticated, format, args...)
}

// KeyedError is an *Error about another key than the request names
// alone: a multi-key acquire refused on one of its keys. Key tells a
// guard which key the error's holder is on, so that it shows the holder
// only to a caller that may read that key.
type KeyedError struct {
	Err *Error
	Key string
}

func (k *KeyedError) Error() string { return k.Err.Message }
func (k *KeyedError) Unwrap() error { return k.Err }
