package fsm

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/fencelock/fencelock/internal/binread"
	"github.com/fencelock/fencelock/internal/locktable"
)

// Op is a command's type: the first byte of its encoding.
type Op uint8

// The command types. Values are part of the log format: never renumber.
const (
	OpAcquire     Op = 1  // Key, Holder, TTL, [Session, LockDelay]
	OpWait        Op = 2  // Key, Holder, TTL, Deadline, [MaxKeyWaiters, MaxWaiters], [Session, LockDelay], [MaxOwnerKeyWaiters]
	OpCancelWait  Op = 3  // Key, Holder
	OpRelease     Op = 4  // Key, Holder, Token (0: any token)
	OpExtend      Op = 5  // Key, Holder, Token, TTL
	OpExtendBatch Op = 6  // Holder, TTL, Items{Key, Token}
	OpRenew       Op = 7  // Key, Holder, TTL
	OpTick        Op = 8  // only Now
	OpCancelWaits Op = 9  // Items{Key, Holder}
	OpMember      Op = 10 // NodeID, RaftAddr, ClientAddr (both empty: forget the node)
	OpClusterID   Op = 11 // ClusterID (set once; later ones change nothing)
	OpTokenFloor  Op = 12 // Token: raise the token counter to at least Token
	OpACL         Op = 13 // ACL: one change of the ACL tables

	// Sessions, multi-key acquire. 18 and 19 are kept for them.
	OpSessionOpen   Op = 14 // Holder, TTL
	OpSessionExtend Op = 15 // Holder, Session
	OpSessionClose  Op = 16 // Holder, Session
	OpAcquireKeys   Op = 17 // Holder, TTL, Session, LockDelay, Items{Key}

	// Semaphores and read/write locks: 20..24.
	OpShared Op = 20 // Key, Holder, TTL, Deadline, Shared, [MaxKeyWaiters, MaxWaiters], [MaxOwnerKeyWaiters]

	opLimit Op = 21
)

// byOwnerBit, set in a command's first byte beside its op, is
// Command.ByOwner. Versions from before it refuse the byte as an unknown
// op.
const byOwnerBit = 0x80

var opNames = [...]string{
	OpAcquire: "acquire", OpWait: "wait", OpCancelWait: "cancel-wait",
	OpRelease: "release", OpExtend: "extend", OpExtendBatch: "extend-batch",
	OpRenew: "renew", OpTick: "tick", OpCancelWaits: "cancel-waits",
	OpMember: "member", OpClusterID: "cluster-id", OpTokenFloor: "token-floor",
	OpACL:         "acl",
	OpSessionOpen: "session-open", OpSessionExtend: "session-extend", OpSessionClose: "session-close",
	OpAcquireKeys: "acquire-keys",
	OpShared:      "shared-acquire",
}

func (o Op) String() string {
	if o.known() {
		return opNames[o]
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// known reports whether o is one of the command types.
func (o Op) known() bool { return o > 0 && o < opLimit && opNames[o] != "" }

// Limits of the encoding. They bound what a decoder allocates.
const (
	MaxRequestIDLen = 64
	MaxBatch        = 1000 // items in OpExtendBatch or OpCancelWaits
	MaxNodeIDLen    = 128
	MaxAddrLen      = 256
	MaxClusterIDLen = 64
	MaxWaitLimit    = 1 << 30 // MaxKeyWaiters, MaxWaiters
)

// ErrBadCommand: a log entry could not be decoded.
var ErrBadCommand = errors.New("fsm: bad command")

// Item is one element of a batch: (Key, Token) for OpExtendBatch, (Key,
// Holder) for OpCancelWaits.
type Item struct {
	Key    string
	Holder string
	Token  uint64
}

// Command is one proposal. Which fields matter depends on Op (see the
// constants); the others must be zero, and Encode leaves them out.
type Command struct {
	Op        Op
	RequestID string         // optional; a retry under the same id gets the first answer
	Now       locktable.Time // cluster time, stamped by the leader
	Key       string
	Holder    string
	Token     uint64
	TTL       locktable.Duration
	Deadline  locktable.Time
	Items     []Item

	// OpWait: the queue limits the leader applies (0: none). They travel
	// in the command so that every node refuses the same waits whatever
	// its own configuration, and a leader's new limits need no restart
	// of the others.
	MaxKeyWaiters int
	MaxWaiters    int
	// MaxOwnerKeyWaiters caps the waiters of the holder's owner
	// (locktable.OwnerOf: with ACLs, its principal) in the key's queue;
	// the leader sets it for calls of a principal.
	MaxOwnerKeyWaiters int

	// OpMember: a cluster member and the address its clients use, so that
	// a follower can name the leader's client address.
	NodeID     string
	RaftAddr   string
	ClientAddr string

	// OpClusterID: the cluster's identity, chosen by its first leader.
	ClusterID string

	// OpACL: the change.
	ACL *ACLChange

	// Sessions and lock-delay: the session a grant is taken
	// under (0: none), or the session an op names; the lock-delay a grant
	// asks for (0: none).
	Session   uint64
	LockDelay locktable.Duration

	// OpShared: the semaphore or read/write request.
	Shared locktable.Shared

	// ByOwner, on any command, switches the request-id memory to the
	// rules by owner (memory.go) from this entry on, for good. A leader
	// sets it on what it proposes until its state machine has applied
	// one, so a log switches at the first entry a leader of this version
	// wrote, and a log written before replays under the rules it was
	// written under.
	ByOwner bool
}

// Encoding, after the op byte, all integers varints:
//
//	byte op (with byOwnerBit for ByOwner) |
//	string request id | varint now | the op's fields in the order listed
//	at its constant; a string is uvarint length then bytes; Items is a
//	uvarint count then each item's two fields. Fields in brackets are
//	left out, together, when they are all zero and no bracket after them
//	is written, as entries written before they existed are.

// Encode appends nothing it cannot decode: it refuses commands whose strings
// or batches exceed the limits.
func Encode(c Command) ([]byte, error) {
	if !c.Op.known() {
		return nil, fmt.Errorf("%w: unknown op %d", ErrBadCommand, c.Op)
	}
	if len(c.RequestID) > MaxRequestIDLen {
		return nil, fmt.Errorf("%w: request id of %d bytes", ErrBadCommand, len(c.RequestID))
	}
	if len(c.Key) > locktable.MaxKeyLen || len(c.Holder) > locktable.MaxHolderLen {
		return nil, fmt.Errorf("%w: key or holder too long", ErrBadCommand)
	}
	if len(c.Items) > MaxBatch {
		return nil, fmt.Errorf("%w: %d items", ErrBadCommand, len(c.Items))
	}
	if len(c.NodeID) > MaxNodeIDLen || len(c.RaftAddr) > MaxAddrLen || len(c.ClientAddr) > MaxAddrLen {
		return nil, fmt.Errorf("%w: node id or address too long", ErrBadCommand)
	}
	if len(c.ClusterID) > MaxClusterIDLen || (c.Op == OpClusterID && c.ClusterID == "") {
		return nil, fmt.Errorf("%w: cluster id of %d bytes", ErrBadCommand, len(c.ClusterID))
	}
	if c.MaxKeyWaiters < 0 || c.MaxWaiters < 0 || c.MaxOwnerKeyWaiters < 0 ||
		c.MaxKeyWaiters > MaxWaitLimit || c.MaxWaiters > MaxWaitLimit || c.MaxOwnerKeyWaiters > MaxWaitLimit ||
		(c.Op != OpWait && c.Op != OpShared && (c.MaxKeyWaiters != 0 || c.MaxWaiters != 0 || c.MaxOwnerKeyWaiters != 0)) {
		return nil, fmt.Errorf("%w: wait limits %d, %d, %d", ErrBadCommand, c.MaxKeyWaiters, c.MaxWaiters, c.MaxOwnerKeyWaiters)
	}
	if err := checkSessionFields(c); err != nil {
		return nil, err
	}
	b := make([]byte, 0, 24+len(c.RequestID)+len(c.Key)+len(c.Holder)+len(c.Items)*24)
	op := byte(c.Op)
	if c.ByOwner {
		op |= byOwnerBit
	}
	b = append(b, op)
	b = appendString(b, c.RequestID)
	b = binary.AppendVarint(b, int64(c.Now))
	switch c.Op {
	case OpAcquire, OpRenew:
		b = appendString(b, c.Key)
		b = appendString(b, c.Holder)
		b = binary.AppendVarint(b, int64(c.TTL))
		b = appendGrantOptions(b, c)
	case OpWait:
		b = appendString(b, c.Key)
		b = appendString(b, c.Holder)
		b = binary.AppendVarint(b, int64(c.TTL))
		b = binary.AppendVarint(b, int64(c.Deadline))
		owner := c.MaxOwnerKeyWaiters != 0
		if c.MaxKeyWaiters != 0 || c.MaxWaiters != 0 || hasGrantOptions(c) || owner {
			b = binary.AppendUvarint(b, uint64(c.MaxKeyWaiters))
			b = binary.AppendUvarint(b, uint64(c.MaxWaiters))
		}
		if hasGrantOptions(c) || owner {
			b = binary.AppendUvarint(b, c.Session)
			b = binary.AppendUvarint(b, uint64(c.LockDelay))
		}
		if owner {
			b = binary.AppendUvarint(b, uint64(c.MaxOwnerKeyWaiters))
		}
	case OpSessionOpen, OpSessionExtend, OpSessionClose, OpAcquireKeys:
		var err error
		if b, err = appendSessionOp(b, c); err != nil {
			return nil, err
		}
	case OpCancelWait:
		b = appendString(b, c.Key)
		b = appendString(b, c.Holder)
	case OpRelease:
		b = appendString(b, c.Key)
		b = appendString(b, c.Holder)
		b = binary.AppendUvarint(b, c.Token)
	case OpExtend:
		b = appendString(b, c.Key)
		b = appendString(b, c.Holder)
		b = binary.AppendUvarint(b, c.Token)
		b = binary.AppendVarint(b, int64(c.TTL))
	case OpExtendBatch:
		b = appendString(b, c.Holder)
		b = binary.AppendVarint(b, int64(c.TTL))
		b = binary.AppendUvarint(b, uint64(len(c.Items)))
		for _, it := range c.Items {
			if len(it.Key) > locktable.MaxKeyLen {
				return nil, fmt.Errorf("%w: key too long", ErrBadCommand)
			}
			b = appendString(b, it.Key)
			b = binary.AppendUvarint(b, it.Token)
		}
	case OpTick:
	case OpTokenFloor:
		b = binary.AppendUvarint(b, c.Token)
	case OpMember:
		b = appendString(b, c.NodeID)
		b = appendString(b, c.RaftAddr)
		b = appendString(b, c.ClientAddr)
	case OpClusterID:
		b = appendString(b, c.ClusterID)
	case OpACL:
		var err error
		if b, err = appendACLChange(b, c.ACL); err != nil {
			return nil, err
		}
	case OpShared:
		b = appendSharedCommand(b, c)
	case OpCancelWaits:
		b = binary.AppendUvarint(b, uint64(len(c.Items)))
		for _, it := range c.Items {
			if len(it.Key) > locktable.MaxKeyLen || len(it.Holder) > locktable.MaxHolderLen {
				return nil, fmt.Errorf("%w: key or holder too long", ErrBadCommand)
			}
			b = appendString(b, it.Key)
			b = appendString(b, it.Holder)
		}
	}
	return b, nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// Decode parses an entry made by Encode. Any other input is refused with an
// error matching ErrBadCommand; Decode never panics and allocates at most
// in proportion to len(data).
func Decode(data []byte) (Command, error) {
	if len(data) == 0 {
		return Command{}, fmt.Errorf("%w: empty", ErrBadCommand)
	}
	c := Command{Op: Op(data[0] &^ byOwnerBit), ByOwner: data[0]&byOwnerBit != 0}
	if !c.Op.known() {
		return Command{}, fmt.Errorf("%w: unknown op %d", ErrBadCommand, data[0])
	}
	d := reader{binread.New(data[1:])}
	c.RequestID = d.String(MaxRequestIDLen)
	c.Now = locktable.Time(d.Varint())
	switch c.Op {
	case OpAcquire, OpRenew:
		c.Key, c.Holder = d.keyHolder()
		c.TTL = locktable.Duration(d.Varint())
		if c.Op == OpAcquire {
			readGrantOptions(&d, &c)
		}
	case OpWait:
		c.Key, c.Holder = d.keyHolder()
		c.TTL = locktable.Duration(d.Varint())
		c.Deadline = locktable.Time(d.Varint())
		var limits, options, owner bool
		if limits = d.Err() == nil && d.Len() > 0; limits {
			c.MaxKeyWaiters, c.MaxWaiters = d.limit(), d.limit()
		}
		if options = d.Err() == nil && d.Len() > 0; options {
			c.Session, c.LockDelay = d.Uvarint(), d.lockDelay()
		}
		if owner = d.Err() == nil && d.Len() > 0; owner {
			c.MaxOwnerKeyWaiters = d.limit()
		}
		// One encoding per command: a bracket is written when it or one
		// after it is not all zero.
		switch {
		case d.Err() != nil:
		case owner && c.MaxOwnerKeyWaiters == 0:
			d.fail("owner wait limit zero")
		case options && !owner && !hasGrantOptions(c):
			d.fail("grant options both zero")
		case limits && !options && c.MaxKeyWaiters == 0 && c.MaxWaiters == 0:
			d.fail("wait limits both zero")
		}
	case OpSessionOpen, OpSessionExtend, OpSessionClose, OpAcquireKeys:
		readSessionOp(&d, &c)
	case OpCancelWait:
		c.Key, c.Holder = d.keyHolder()
	case OpRelease:
		c.Key, c.Holder = d.keyHolder()
		c.Token = d.Uvarint()
	case OpExtend:
		c.Key, c.Holder = d.keyHolder()
		c.Token = d.Uvarint()
		c.TTL = locktable.Duration(d.Varint())
	case OpExtendBatch:
		c.Holder = d.String(locktable.MaxHolderLen)
		c.TTL = locktable.Duration(d.Varint())
		n := d.count()
		for i := 0; i < n && d.Err() == nil; i++ {
			c.Items = append(c.Items, Item{Key: d.String(locktable.MaxKeyLen), Token: d.Uvarint()})
		}
	case OpTick:
	case OpTokenFloor:
		c.Token = d.Uvarint()
	case OpMember:
		c.NodeID = d.String(MaxNodeIDLen)
		c.RaftAddr = d.String(MaxAddrLen)
		c.ClientAddr = d.String(MaxAddrLen)
	case OpClusterID:
		if c.ClusterID = d.String(MaxClusterIDLen); c.ClusterID == "" && d.Err() == nil {
			d.fail("empty cluster id")
		}
	case OpACL:
		c.ACL = readACLChange(&d)
	case OpShared:
		readSharedCommand(&d, &c)
	case OpCancelWaits:
		n := d.count()
		for i := 0; i < n && d.Err() == nil; i++ {
			k, h := d.keyHolder()
			c.Items = append(c.Items, Item{Key: k, Holder: h})
		}
	}
	if d.Err() != nil {
		return Command{}, d.failure()
	}
	if d.Len() != 0 {
		return Command{}, fmt.Errorf("%w: %d trailing bytes", ErrBadCommand, d.Len())
	}
	return c, nil
}

// reader reads a command or the FSM's snapshot. Its failures are
// reported as ErrBadCommand.
type reader struct{ binread.Reader }

// fail records a decoder's own refusal, unless a failure came first.
func (r *reader) fail(format string, args ...any) {
	r.Fail(fmt.Errorf(format, args...))
}

// failure is r's first failure as a bad command, nil if none.
func (r *reader) failure() error {
	if err := r.Err(); err != nil {
		return fmt.Errorf("%w: %w", ErrBadCommand, err)
	}
	return nil
}

// limit reads a wait limit, 0..MaxWaitLimit.
func (r *reader) limit() int {
	v := r.Uvarint()
	if v > MaxWaitLimit {
		r.fail("wait limit %d", v)
		return 0
	}
	return int(v)
}

// keyHolder reads a key and the holder after it into one allocation
// instead of two: the table keeps the two as long as each other anyway.
// The holder's length prefix between them is the few bytes it costs.
func (r *reader) keyHolder() (key, holder string) {
	all := r.Rest()
	k := r.Bytes(locktable.MaxKeyLen)
	kEnd := len(all) - r.Len()
	h := r.Bytes(locktable.MaxHolderLen)
	hEnd := len(all) - r.Len()
	if r.Err() != nil {
		return "", ""
	}
	kStart := kEnd - len(k)
	s := string(all[kStart:hEnd])
	return s[:len(k)], s[hEnd-len(h)-kStart:]
}

// count reads a batch length, refusing one that the remaining bytes cannot
// hold (each item takes at least 2 bytes) so a forged count allocates
// nothing.
func (r *reader) count() int {
	n := r.Uvarint()
	if r.Err() != nil {
		return 0
	}
	if n > MaxBatch || n > uint64(r.Len())/2 {
		r.fail("batch of %d items", n)
		return 0
	}
	return int(n)
}
