package fsm

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/fencelock/fencelock/internal/locktable"
)

// Sessions, multi-key acquire and lock-delay in the log.
//
// OpAcquire and OpWait carry a grant's options as a trailing bracket
// [Session, LockDelay] (two uvarints), left out when both are 0 so that
// entries written before it existed decode as they were; OpWait then
// writes its limits bracket too (0, 0 allowed). OpSessionOpen,
// OpSessionExtend and OpSessionClose are the session's own lifecycle;
// OpAcquireKeys grants up to locktable.MaxMultiKeys keys all or none.
// Opens and closes are remembered for retries by request id (dedupe.go);
// extends are not (a re-sent extend only moves the same expiry again), nor
// multi-key acquires (a re-sent one renews the same holder's grants under
// new tokens).

func hasGrantOptions(c Command) bool { return c.Session != 0 || c.LockDelay != 0 }

// checkSessionFields refuses Session and LockDelay where an op has no use
// for them, and a lock-delay out of bounds.
func checkSessionFields(c Command) error {
	switch c.Op {
	case OpAcquire, OpWait, OpAcquireKeys:
	case OpSessionExtend, OpSessionClose:
		if c.LockDelay != 0 {
			return fmt.Errorf("%w: lock-delay on %s", ErrBadCommand, c.Op)
		}
	default:
		if hasGrantOptions(c) {
			return fmt.Errorf("%w: session or lock-delay on %s", ErrBadCommand, c.Op)
		}
	}
	if c.LockDelay < 0 || c.LockDelay > locktable.MaxLockDelay {
		return fmt.Errorf("%w: lock-delay %d", ErrBadCommand, c.LockDelay)
	}
	if c.Op == OpAcquireKeys && (len(c.Items) == 0 || len(c.Items) > locktable.MaxMultiKeys) {
		return fmt.Errorf("%w: %d keys", ErrBadCommand, len(c.Items))
	}
	return nil
}

func appendGrantOptions(b []byte, c Command) []byte {
	if !hasGrantOptions(c) {
		return b
	}
	b = binary.AppendUvarint(b, c.Session)
	return binary.AppendUvarint(b, uint64(c.LockDelay))
}

func readGrantOptions(d *reader, c *Command) {
	if d.Err() != nil || d.Len() == 0 {
		return
	}
	c.Session = d.Uvarint()
	c.LockDelay = d.lockDelay()
	if d.Err() == nil && !hasGrantOptions(*c) {
		d.fail("grant options both zero")
	}
}

func (r *reader) lockDelay() locktable.Duration {
	v := r.Uvarint()
	if v > uint64(locktable.MaxLockDelay) {
		r.fail("lock-delay %d", v)
		return 0
	}
	return locktable.Duration(v)
}

func appendSessionOp(b []byte, c Command) ([]byte, error) {
	b = appendString(b, c.Holder)
	switch c.Op {
	case OpSessionOpen:
		b = binary.AppendVarint(b, int64(c.TTL))
	case OpSessionExtend, OpSessionClose:
		b = binary.AppendUvarint(b, c.Session)
	case OpAcquireKeys:
		b = binary.AppendVarint(b, int64(c.TTL))
		b = binary.AppendUvarint(b, c.Session)
		b = binary.AppendUvarint(b, uint64(c.LockDelay))
		b = binary.AppendUvarint(b, uint64(len(c.Items)))
		for _, it := range c.Items {
			if it.Key == "" || len(it.Key) > locktable.MaxKeyLen || it.Holder != "" || it.Token != 0 {
				return nil, fmt.Errorf("%w: bad key item", ErrBadCommand)
			}
			b = appendString(b, it.Key)
		}
	}
	return b, nil
}

func readSessionOp(d *reader, c *Command) {
	c.Holder = d.String(locktable.MaxHolderLen)
	switch c.Op {
	case OpSessionOpen:
		c.TTL = locktable.Duration(d.Varint())
	case OpSessionExtend, OpSessionClose:
		c.Session = d.Uvarint()
	case OpAcquireKeys:
		c.TTL = locktable.Duration(d.Varint())
		c.Session = d.Uvarint()
		c.LockDelay = d.lockDelay()
		n := d.count()
		if d.Err() == nil && (n == 0 || n > locktable.MaxMultiKeys) {
			d.fail("%d keys", n)
		}
		for i := 0; i < n && d.Err() == nil; i++ {
			// An empty key is refused as Encode refuses it: it takes one
			// byte, where count assumed two, and could not come back.
			if k := d.String(locktable.MaxKeyLen); k != "" || d.Err() != nil {
				c.Items = append(c.Items, Item{Key: k})
			} else {
				d.fail("empty key")
			}
		}
	}
}

// applySession runs the session ops and the multi-key acquire.
func (f *FSM) applySession(c Command, r *Result, now locktable.Time) {
	t := f.table
	switch c.Op {
	case OpSessionOpen:
		r.Session, r.Err = t.OpenSession(c.Holder, now, c.TTL)
	case OpSessionExtend:
		r.Session, r.Err = t.ExtendSession(c.Session, c.Holder, now)
	case OpSessionClose:
		r.Session, r.Err = t.CloseSession(c.Session, c.Holder, now)
	case OpAcquireKeys:
		keys := make([]string, len(c.Items))
		for i, it := range c.Items {
			keys[i] = it.Key
		}
		r.Leases, r.Err = t.AcquireAll(keys, c.Holder, now, c.TTL, locktable.Options{Session: c.Session, LockDelay: c.LockDelay})
		r.Granted = r.Err == nil
	}
}

func grantOptions(c Command) locktable.Options {
	return locktable.Options{Session: c.Session, LockDelay: c.LockDelay}
}

// GetSession returns session id if it is alive at now.
func (f *FSM) GetSession(id uint64, now locktable.Time) (locktable.Session, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.table.GetSession(id, now)
}

// SessionKeys returns the keys held under session id, sorted.
func (f *FSM) SessionKeys(id uint64) []string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.table.SessionKeys(id)
}

// LockDelay reports until when key is granted to nobody, if it is in its
// lock-delay at now.
func (f *FSM) LockDelay(key string, now locktable.Time) (locktable.Time, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.table.LockDelay(key, now)
}

// isSessionRefusal reports a refusal the dedupe encoding cannot carry (it
// knows held and not held): a retry of it runs again instead.
func isSessionRefusal(err error) bool {
	return errors.Is(err, locktable.ErrNoSession) || errors.Is(err, locktable.ErrTooManySessions) ||
		errors.Is(err, locktable.ErrLockDelay) || errors.Is(err, locktable.ErrSessionLock)
}

// SessionStats is the number of sessions not yet ended and of the locks
// held under them.
func (f *FSM) SessionStats() (sessions, locks int) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.table.SessionStats()
}

// Owner is what the holders of owner (locktable.OwnerOf) have in the
// table now.
func (f *FSM) Owner(owner string) locktable.OwnerCount {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.table.Owner(owner)
}

// Counted reports whether holder has a lease record or a queue place on
// key already (locktable.Table.Counted).
func (f *FSM) Counted(key, holder string) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.table.Counted(key, holder)
}
