package locktable

import "fmt"

// MaxMultiKeys bounds the keys of one AcquireAll.
const MaxMultiKeys = 64

// grantOpts is a checked Options: the live session, the lock-delay and the
// ttl the grant takes.
type grantOpts struct {
	sess  *session
	delay Duration
	ttl   Duration
}

// prepare checks a grant's arguments; with a session, the session must be
// holder's and alive at now, and its ttl is the grant's.
func (t *Table) prepare(key, holder string, now Time, ttl Duration, o Options) (grantOpts, error) {
	if err := validate(key, holder); err != nil {
		return grantOpts{}, err
	}
	return t.prepareOpts(holder, now, ttl, o)
}

func (t *Table) prepareOpts(holder string, now Time, ttl Duration, o Options) (grantOpts, error) {
	if err := validateHolder(holder); err != nil {
		return grantOpts{}, err
	}
	if o.LockDelay < 0 || o.LockDelay > MaxLockDelay {
		return grantOpts{}, &InputError{Field: "lock_delay", Reason: fmt.Sprintf("%d must be between 0 and %d", o.LockDelay, MaxLockDelay), kind: ErrInvalidTTL}
	}
	g := grantOpts{delay: o.LockDelay, ttl: ttl}
	if o.Session == 0 {
		if err := validateTTL(now, ttl); err != nil {
			return grantOpts{}, err
		}
		t.see(now)
		return g, nil
	}
	t.see(now)
	s, err := t.liveSession(o.Session, holder, now)
	if err != nil {
		return grantOpts{}, err
	}
	g.sess, g.ttl = s, s.ttl
	return g, nil
}

// settleKey applies, at now, what is due on key: the end of a dead session
// that holds it, an expired lease with a lock-delay, a hand-off to a waiter.
func (t *Table) settleKey(key string, now Time) {
	e := t.keys.get(key)
	if e != nil && e.multi {
		t.settleShared(e, t.multi[key], now)
		return
	}
	if e := t.endDue(e, key, now); e != nil {
		t.settle(e, now)
	}
}

// blocked is why holder cannot be granted key at now (nil: it can). It
// changes nothing.
func (t *Table) blocked(key, holder string, now Time) error {
	e := t.keys.get(key)
	if e != nil && e.multi { // a semaphore or read/write lock
		m := t.multi[key]
		return &KindMismatchError{Key: key, Kind: m.kind, Permits: m.permits, Asked: Shared{Kind: Exclusive}}
	}
	if e != nil && e.held() && e.alive(now) && e.holder.name != holder {
		return &HeldError{Lease: e.lease()}
	}
	if t.inDelay(key, now) {
		return &LockDelayError{Key: key, Until: t.delayed[key]}
	}
	return nil
}

// grantable settles key and reports why holder cannot have it.
func (t *Table) grantable(key, holder string, now Time) error {
	t.settleKey(key, now)
	err := t.blocked(key, holder, now)
	if err != nil {
		if e := t.keys.get(key); e != nil {
			t.tidy(e)
		}
	}
	return err
}

// AcquireAll grants every key of keys to holder, or none: when any of them
// cannot be granted now (held by another holder, in its lock-delay) it
// refuses with that key's error and grants nothing. The grants are issued
// in the order of keys, each with its own token. keys holds 1 to
// MaxMultiKeys distinct keys. It never waits, so it can never deadlock:
// a caller that wants to wait retries (docs/PRIMITIVES.md).
func (t *Table) AcquireAll(keys []string, holder string, now Time, ttl Duration, o Options) ([]Lease, error) {
	switch {
	case len(keys) == 0:
		return nil, &InputError{Field: "keys", Reason: "at least one key is required", kind: ErrInvalidKey}
	case len(keys) > MaxMultiKeys:
		return nil, &InputError{Field: "keys", Reason: fmt.Sprintf("%d keys, the limit is %d", len(keys), MaxMultiKeys), kind: ErrInvalidKey}
	}
	seen := make(map[string]bool, len(keys))
	for _, k := range keys {
		if err := validateKey(k); err != nil {
			return nil, err
		}
		if seen[k] {
			return nil, &InputError{Field: "keys", Reason: fmt.Sprintf("%q is listed twice", k), kind: ErrInvalidKey}
		}
		seen[k] = true
	}
	g, err := t.prepareOpts(holder, now, ttl, o)
	if err != nil {
		return nil, err
	}
	if g.sess != nil {
		n := len(g.sess.locks) + len(g.sess.waits)
		for _, k := range keys {
			if e := t.keys.get(k); e == nil || !e.held() || e.holder.sess != g.sess {
				n++
			}
		}
		if n > MaxSessionLocks {
			return nil, &SessionLimitError{Scope: "session", Limit: MaxSessionLocks}
		}
	}
	// Settle every key first, then check them all: settling one key (the
	// end of a dead session) may hand another on.
	for _, k := range keys {
		t.settleKey(k, now)
	}
	for _, k := range keys {
		if err := t.blocked(k, holder, now); err != nil {
			for _, k := range keys {
				if e := t.keys.get(k); e != nil {
					t.tidy(e)
				}
			}
			return nil, err
		}
	}
	out := make([]Lease, len(keys))
	for i, k := range keys {
		e := t.keys.get(k)
		if e == nil {
			e = t.newEntry(k)
		}
		out[i] = t.grant(e, holder, now, g.ttl, now, g)
	}
	return out, nil
}

// late reports whether w leaves its queue at now: its deadline passed, or
// the session it waits under is dead.
func (w *waiter) late(now Time) bool {
	return now >= w.deadline || (w.sess != nil && !w.sess.alive(now))
}

// setWaiterSession moves w, queued on key, under s (nil: none).
func (t *Table) setWaiterSession(key string, w *waiter, s *session) {
	if w.sess == s {
		return
	}
	if w.sess != nil {
		delete(w.sess.waits, key)
	}
	w.sess = s
	if s != nil {
		s.waits[key] = struct{}{}
	}
}
