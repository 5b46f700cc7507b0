package fsm

import (
	"encoding/binary"

	"github.com/fencelock/fencelock/internal/locktable"
)

// OpShared is a semaphore or read/write acquire: try once when Deadline
// has passed (0: never wait), else queue until Deadline. Its encoding
// after Key, Holder, TTL and Deadline is
//
//	byte kind (locktable.Kind) | uvarint permits | byte write |
//	[uvarint MaxKeyWaiters | uvarint MaxWaiters]
//
// Like OpWait it is remembered while queued and once granted.

// waits reports whether op queues: its retry keeps the queue place, and is
// answered with its grant only while that grant is live.
func waits(op Op) bool { return op == OpWait || op == OpShared }

func appendSharedCommand(b []byte, c Command) []byte {
	b = appendString(b, c.Key)
	b = appendString(b, c.Holder)
	b = binary.AppendVarint(b, int64(c.TTL))
	b = binary.AppendVarint(b, int64(c.Deadline))
	b = append(b, byte(c.Shared.Kind))
	b = binary.AppendUvarint(b, uint64(max(c.Shared.Permits, 0)))
	var w byte
	if c.Shared.Write {
		w = 1
	}
	b = append(b, w)
	if c.MaxKeyWaiters != 0 || c.MaxWaiters != 0 || c.MaxOwnerKeyWaiters != 0 {
		b = binary.AppendUvarint(b, uint64(c.MaxKeyWaiters))
		b = binary.AppendUvarint(b, uint64(c.MaxWaiters))
	}
	if c.MaxOwnerKeyWaiters != 0 {
		b = binary.AppendUvarint(b, uint64(c.MaxOwnerKeyWaiters))
	}
	return b
}

func readSharedCommand(d *reader, c *Command) {
	c.Key, c.Holder = d.keyHolder()
	c.TTL = locktable.Duration(d.Varint())
	c.Deadline = locktable.Time(d.Varint())
	c.Shared.Kind = locktable.Kind(d.Byte())
	permits := d.Uvarint()
	if permits > locktable.MaxPermits {
		d.fail("%d permits", permits)
	}
	c.Shared.Permits = int(permits)
	switch d.Byte() {
	case 0:
	case 1:
		c.Shared.Write = true
	default:
		d.fail("bad write flag")
	}
	if d.Err() == nil && d.Len() > 0 {
		c.MaxKeyWaiters, c.MaxWaiters = d.limit(), d.limit()
		owner := d.Err() == nil && d.Len() > 0
		if owner {
			c.MaxOwnerKeyWaiters = d.limit()
		}
		switch {
		case d.Err() != nil:
		case owner && c.MaxOwnerKeyWaiters == 0:
			d.fail("owner wait limit zero")
		case !owner && c.MaxKeyWaiters == 0 && c.MaxWaiters == 0:
			d.fail("wait limits both zero")
		}
	}
}

func (f *FSM) applyShared(c Command, r *Result, now locktable.Time) {
	lim := locktable.WaitLimits{PerKey: c.MaxKeyWaiters, Total: c.MaxWaiters, PerKeyOwner: c.MaxOwnerKeyWaiters}
	r.Lease, r.Granted, r.Err = f.table.AcquireShared(c.Key, c.Holder, c.Shared, now, c.TTL, c.Deadline, lim)
	r.Queued = r.Err == nil && !r.Granted
}

// Holders returns every lease alive at now on key (a semaphore's permits,
// a read/write lock's readers or writer, or an exclusive lease).
func (f *FSM) Holders(key string, now locktable.Time) []locktable.Lease {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.table.Holders(key, now)
}

// LeaseOf returns holder's lease on key if it is alive at now, whatever
// the key's kind.
func (f *FSM) LeaseOf(key, holder string, now locktable.Time) (locktable.Lease, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.table.LeaseOf(key, holder, now)
}
