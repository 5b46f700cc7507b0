package api

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"time"
)

// Watches (docs/API.md, "Watch"): GET /v1/watch?prefix=P&after=REV&wait_ms=W
// answers a WatchResponse: the changes on the keys under P (or of the one
// key=K) whose revision is after REV, at most limit of them, waiting up to
// W for the first one; send the answer's Revision as after next time. With
// "Accept: text/event-stream" the same path streams them as server-sent
// events (one "id: REV", "event: TYPE", "data: WatchEvent" each), resuming
// from after or a Last-Event-ID header. A revision older than the server
// still keeps is refused with CodeCompacted, whose Error.CompactRevision is
// the oldest revision it accepts; resync from list=true.
const PathWatch = "/v1/watch"

// Query parameters of a watch, beside QueryKey, QueryPrefix, QueryAfter
// (a Revision) and QueryLimit.
const (
	QueryWaitMs = "wait_ms" // how long a long-poll waits for a first event; absent: DefaultWatchWait
	QueryList   = "list"    // "true": answer the live leases now and the revision they are at, no events
)

// Server-sent events.
const (
	ContentTypeEventStream = "text/event-stream"
	HeaderLastEventID      = "Last-Event-ID" // a reconnecting EventSource sends the last id it saw
	// SSEProgress is the event type of a frame that only moves the
	// stream's revision (its id) past changes on other keys, sent every
	// so often while nothing matches, so a reconnect resumes from there.
	SSEProgress = "progress"
	// SSEError is the event type of the last frame of a stream that the
	// server ends: its data is an Error (CodeCompacted for a consumer that
	// fell behind the history).
	SSEError = "error"
)

// Limits of watches.
const (
	DefaultWatchWait  = 30 * time.Second
	MaxWatchWait      = 5 * time.Minute
	DefaultWatchLimit = 1000 // events per answer when limit is not given
	MaxWatchLimit     = 1000 // about 1.4 MB of events with maximal keys: under a frame
)

// Error codes of watches.
const (
	// CodeCompacted (410): the revision asked for is older than the
	// history this server keeps (it has moved on, or restarted from or
	// installed a snapshot taken after it: a restart otherwise replays the
	// same revisions), so events after it may be missing; Error.CompactRevision
	// is the oldest one it accepts. A stream that falls that far behind is
	// ended with it too. Resync: list=true, then watch after its revision.
	CodeCompacted = "compacted"
	// CodeTooManyWatchers (429): the server, or this caller, has as many
	// watches open as it allows; nothing was started.
	CodeTooManyWatchers = "too_many_watchers"
)

// Event types of WatchEvent.Type.
const (
	WatchGranted    = "granted"     // Holder got Token (directly, or handed over from the queue)
	WatchReleased   = "released"    // Holder released Token
	WatchExpired    = "expired"     // Token's lease ran out
	WatchWaitJoined = "wait-joined" // Holder joined the key's queue
	WatchWaitLeft   = "wait-left"   // Holder left the queue: Reason "cancelled" or "deadline"
)

// Reasons of a wait-left event.
const (
	WaitLeftCancelled = "cancelled"
	WaitLeftDeadline  = "deadline"
)

// Revision is an event's place in the cluster's history: the raft log
// index of the entry that caused it and its position among that entry's
// events (1, 2, ...). Every node applies the same entries in the same
// order and its table emits the same events for each, so a revision names
// the same event on every node and a watcher can resume on any of them.
// It is a pair rather than one packed integer because an entry has no
// useful bound on its events (one tick can expire a million leases), so
// no split of 64 bits could be sure not to overflow.
//
// Its text form is "INDEX.SEQ"; "INDEX" alone (Seq EndOfEntry) means after
// every event of that entry, the revision of a state read at that index.
type Revision struct {
	Index uint64
	Seq   uint64
}

// EndOfEntry as a Seq stands for after every event of the entry.
const EndOfEntry = math.MaxUint64

// Compare is -1, 0 or +1 as r is before, the same as, or after o.
func (r Revision) Compare(o Revision) int {
	switch {
	case r.Index < o.Index:
		return -1
	case r.Index > o.Index:
		return 1
	case r.Seq < o.Seq:
		return -1
	case r.Seq > o.Seq:
		return 1
	}
	return 0
}

func (r Revision) String() string {
	if r.Seq == EndOfEntry {
		return strconv.FormatUint(r.Index, 10)
	}
	return strconv.FormatUint(r.Index, 10) + "." + strconv.FormatUint(r.Seq, 10)
}

// ErrBadRevision: a revision's text is not "INDEX" or "INDEX.SEQ".
var ErrBadRevision = errors.New(`revision must be "INDEX" or "INDEX.SEQ" (unsigned integers)`)

// ParseRevision reads the text form.
func ParseRevision(s string) (Revision, error) {
	i, q, dotted := strings.Cut(s, ".")
	idx, err := strconv.ParseUint(i, 10, 64)
	if err != nil {
		return Revision{}, ErrBadRevision
	}
	if !dotted {
		return Revision{Index: idx, Seq: EndOfEntry}, nil
	}
	seq, err := strconv.ParseUint(q, 10, 64)
	if err != nil || seq == EndOfEntry {
		return Revision{}, ErrBadRevision
	}
	return Revision{Index: idx, Seq: seq}, nil
}

// MarshalText writes the text form, so JSON carries a revision as a string.
func (r Revision) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// UnmarshalText reads the text form.
func (r *Revision) UnmarshalText(b []byte) error {
	v, err := ParseRevision(string(b))
	if err != nil {
		return err
	}
	*r = v
	return nil
}

// WatchRequest is a watch's query: Key (one key) or Prefix (every key that
// starts with it; "" is all keys), not both. After nil starts at the
// answering node's present. WaitMs is how long to wait for a first event
// (0: answer at once; the HTTP query's absent wait_ms is
// DefaultWatchWait). Limit 0 is DefaultWatchLimit.
type WatchRequest struct {
	Key    string
	Prefix string
	After  *Revision
	WaitMs int64
	Limit  int
	List   bool
}

// WatchEvent is one change. Times are cluster time in milliseconds: the
// clock leases are measured on, counted from when the cluster's clock
// began (not wall time), so only differences mean anything. SinceMs is when what ended or began
// started: for granted, when the holder began asking (it may have waited);
// for released and expired, when the token was granted; for wait events,
// when the holder joined the queue.
type WatchEvent struct {
	Revision Revision `json:"revision"`
	Type     string   `json:"type"`
	Key      string   `json:"key"`
	Holder   string   `json:"holder"`
	Token    uint64   `json:"token,omitempty"`
	TTLMs    int64    `json:"ttl_ms,omitempty"` // granted: the lease's ttl
	Reason   string   `json:"reason,omitempty"` // wait-left
	AtMs     int64    `json:"at_ms"`
	SinceMs  int64    `json:"since_ms"`
}

// WatchResponse answers a long-poll: the events after the request's
// revision (none when the wait ran out), and the revision to send as
// after next time, which moves past changes on other keys too. With
// list=true, Locks holds the live leases (up to MaxLimit) as of Revision
// and Events is empty.
type WatchResponse struct {
	Events   []WatchEvent `json:"events"`
	Revision Revision     `json:"revision"`
	Locks    []Lease      `json:"locks,omitempty"`
}
