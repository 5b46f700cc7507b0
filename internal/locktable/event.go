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
