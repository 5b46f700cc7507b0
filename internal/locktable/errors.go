package locktable

import (
	"errors"
	"fmt"
)

// Limits on input. They bound memory per lease and the size of a snapshot.
const (
	MaxKeyLen    = 1024 // bytes
	MaxHolderLen = 256  // bytes
)

var (
	// ErrInvalidKey: the key is empty or longer than MaxKeyLen.
	ErrInvalidKey = errors.New("locktable: invalid key")
	// ErrInvalidHolder: the holder is empty or longer than MaxHolderLen.
	ErrInvalidHolder = errors.New("locktable: invalid holder")
	// ErrInvalidTTL: ttl <= 0, or now+ttl does not fit the clock.
	ErrInvalidTTL = errors.New("locktable: invalid ttl")
	// ErrHeld: a different holder has a live lease on the key.
	ErrHeld = errors.New("locktable: held by another holder")
	// ErrNotHeld: the (holder, token) pair is not the key's live grant.
	ErrNotHeld = errors.New("locktable: not the live holder")
	// ErrTooManyWaiters: a wait queue is at its limit (WaitLimits).
	ErrTooManyWaiters = errors.New("locktable: too many waiters")
	// ErrNoSession: no such session is alive for this holder (it never
	// existed, ended, or belongs to another holder).
	ErrNoSession = errors.New("locktable: no such live session")
	// ErrTooManySessions: a session limit was reached (SessionLimitError).
	ErrTooManySessions = errors.New("locktable: too many sessions")
	// ErrSessionLock: the lease is held under a session; extend the session.
	ErrSessionLock = errors.New("locktable: held under a session; extend the session")
	// ErrLockDelay: the key is in its lock-delay (LockDelayError).
	ErrLockDelay = errors.New("locktable: in lock-delay")
	// ErrCorrupt: a snapshot could not be decoded.
	ErrCorrupt = errors.New("locktable: corrupt snapshot")
)

// InputError is a refused argument. It matches ErrInvalidKey,
// ErrInvalidHolder or ErrInvalidTTL with errors.Is.
type InputError struct {
	Field  string // "key", "holder" or "ttl"
	Reason string
	kind   error
}

func (e *InputError) Error() string {
	return fmt.Sprintf("locktable: invalid %s: %s", e.Field, e.Reason)
}

func (e *InputError) Unwrap() error { return e.kind }

// HeldError is Acquire's refusal. It carries the lease that stands in the
// way, and matches ErrHeld with errors.Is.
type HeldError struct {
	Lease Lease
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("locktable: %q is held by %q until %d", e.Lease.Key, e.Lease.Holder, e.Lease.Expiry)
}

func (e *HeldError) Unwrap() error { return ErrHeld }

// QueueFullError is WaitWithin's refusal of a holder that would join a
// queue at its limit. It matches ErrTooManyWaiters with errors.Is.
type QueueFullError struct {
	Key string
	// Scope is "key": the key's queue is full; "total": all queues are;
	// "owner": Owner's holders have their share of the key's queue.
	Scope string
	Owner string
	Limit int
}

func (e *QueueFullError) Error() string {
	switch e.Scope {
	case "key":
		return fmt.Sprintf("locktable: %q has %d waiters, the limit", e.Key, e.Limit)
	case "owner":
		return fmt.Sprintf("locktable: %q has %d waiters of %q, the limit of one owner", e.Key, e.Limit, e.Owner)
	}
	return fmt.Sprintf("locktable: %d waiters in all queues, the limit", e.Limit)
}

func (e *QueueFullError) Unwrap() error { return ErrTooManyWaiters }

func validateKey(key string) error { return validateName("key", key, MaxKeyLen, ErrInvalidKey) }

func validateHolder(holder string) error {
	return validateName("holder", holder, MaxHolderLen, ErrInvalidHolder)
}

// validateName refuses an empty s, or one over limit bytes, as field.
func validateName(field, s string, limit int, kind error) error {
	switch {
	case s == "":
		return &InputError{Field: field, Reason: "empty", kind: kind}
	case len(s) > limit:
		return &InputError{Field: field, Reason: fmt.Sprintf("%d bytes, the limit is %d", len(s), limit), kind: kind}
	}
	return nil
}

func validateTTL(now Time, ttl Duration) error {
	switch {
	case ttl <= 0:
		return &InputError{Field: "ttl", Reason: fmt.Sprintf("%d must be > 0", ttl), kind: ErrInvalidTTL}
	case now > 0 && Time(ttl) > maxTime-now:
		return &InputError{Field: "ttl", Reason: "now+ttl overflows the clock", kind: ErrInvalidTTL}
	}
	return nil
}

func validate(key, holder string) error {
	if err := validateKey(key); err != nil {
		return err
	}
	return validateHolder(holder)
}

func validateGrant(key, holder string, now Time, ttl Duration) error {
	if err := validate(key, holder); err != nil {
		return err
	}
	return validateTTL(now, ttl)
}
