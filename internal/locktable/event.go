package locktable

// EventKind says what an Event reports.
type EventKind uint8

const (
	// EventGranted: Holder was granted Token on Key, directly or by hand-off
	// from the queue. Since is when it began waiting (At if it never waited).
	EventGranted EventKind = iota + 1
	// EventReleased: Holder released Token. Since is when it was granted.
	EventReleased
	// EventExpired: Token's lease ended at Expiry without a release, and
	// the table noticed at At. Since is when it was granted.
	EventExpired
	// EventWaitDropped: Holder's deadline passed while queued. Since is when
	// it joined the queue.
	EventWaitDropped
	// EventWaitJoined: Holder joined the back of Key's queue, of any kind
	// of key (a holder already queued that asks again keeps its place and
	// emits nothing). Since and At are when it joined; Expiry is its
	// deadline. Watches.
	EventWaitJoined
	// EventWaitLeft: Holder left Key's queue by cancelling (CancelWait,
	// CancelWaitAt). Since is when it joined; At is 0 on an exclusive key
	// (CancelWait is given no time). A waiter that leaves
	// because it is granted emits EventGranted, one whose deadline passed
	// EventWaitDropped. Watches.
	EventWaitLeft
)

func (k EventKind) String() string {
	switch k {
	case EventGranted:
		return "granted"
	case EventReleased:
		return "released"
	case EventExpired:
		return "expired"
	case EventWaitDropped:
		return "wait-dropped"
	case EventWaitJoined:
		return "wait-joined"
	case EventWaitLeft:
		return "wait-left"
	}
	return "unknown"
}

// Event is one change the table made, as reported to its observer.
type Event struct {
	Kind   EventKind
	Key    string
	Holder string
	Token  uint64
	At     Time
	Since  Time
	Expiry Time
}
