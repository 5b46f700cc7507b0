package api

import (
	"net/http"
	"time"
)

// Sessions, multi-key acquire and lock-delay (docs/PRIMITIVES.md).
//
// A session is a lease of its own: POST PathSessionOpen answers a Session
// with an id; locks taken with AcquireRequest.Session (or
// AcquireAllRequest.Session) live exactly as long as it does; one POST
// PathSessionExtend renews it and so all of them; when it expires or is
// closed, every lock under it is released and handed to its next waiter
// in one committed step. A session belongs to the holder that opened it:
// only that holder (and so only the principal that owns it) may extend
// it, close it or take locks under it.
const (
	PathSessionOpen   = "/v1/session/open"
	PathSessionExtend = "/v1/session/extend"
	PathSessionClose  = "/v1/session/close"
	PathAcquireAll    = "/v1/acquire-all"
)

// Limits of sessions, multi-key acquire and lock-delay; the server refuses
// a request beyond them with a clear error and changes nothing.
const (
	MaxSessions          = 1 << 20 // open sessions in a cluster (too_many_sessions)
	MaxSessionsPerHolder = 1024    // open sessions of one holder (too_many_sessions)
	MaxSessionLocks      = 1 << 16 // locks held plus queue places under one session (too_many_sessions)
	MaxAcquireKeys       = 64      // keys in one acquire-all (invalid_argument)
	MaxLockDelay         = 60 * time.Second
)

// Error codes of sessions and lock-delay.
const (
	CodeNoSession       = "no_session"        // 404: no such live session for this holder (expired, closed, another holder's)
	CodeTooManySessions = "too_many_sessions" // 429: a session limit is reached; nothing changed
	CodeLockDelay       = "lock_delay"        // 409: the key is in its lock-delay after an expiry; RemainingMs says for how long
)

func sessionStatus(code string) (int, bool) {
	switch code {
	case CodeNoSession:
		return http.StatusNotFound, true
	case CodeTooManySessions:
		return http.StatusTooManyRequests, true
	case CodeLockDelay:
		return http.StatusConflict, true
	}
	return 0, false
}

// SessionOpenRequest is POST PathSessionOpen; the answer is a Session.
// An open re-sent under the same RequestID (after a lost answer or a
// failover) is answered with the session it opened while that lives, not
// given a second one.
type SessionOpenRequest struct {
	Holder    string `json:"holder"`
	TTLMs     int64  `json:"ttl_ms"`
	RequestID string `json:"request_id,omitempty"`
}

// SessionRequest is POST PathSessionExtend and PathSessionClose: the
// session's id and the holder that opened it. The answer is a Session:
// after an extend, its new remaining time; after a close, how many locks
// it released (RemainingMs 0). A close re-sent under the same RequestID
// is answered as the first was, not refused with CodeNoSession; an extend
// needs none (a re-sent extend moves the same expiry again).
type SessionRequest struct {
	ID        uint64 `json:"id"`
	Holder    string `json:"holder"`
	RequestID string `json:"request_id,omitempty"`
}

// Session is a live session. Locks counts the locks held under it,
// Waiting its queue places.
type Session struct {
	ID          uint64 `json:"id"`
	Holder      string `json:"holder"`
	TTLMs       int64  `json:"ttl_ms"`
	RemainingMs int64  `json:"remaining_ms"`
	Locks       int    `json:"locks"`
	Waiting     int    `json:"waiting"`
}

// AcquireAllRequest is POST PathAcquireAll: every key, or none. It never
// waits (a held key refuses the lot with CodeHeld, naming the key in the
// message); the answer's Locks carry one token per key, in the order
// given. Keys are 1 to MaxAcquireKeys distinct keys. With Session the
// grants are taken under it and TTLMs is ignored.
type AcquireAllRequest struct {
	Keys        []string `json:"keys"`
	Holder      string   `json:"holder"`
	TTLMs       int64    `json:"ttl_ms,omitempty"`
	Session     uint64   `json:"session,omitempty"`
	LockDelayMs int64    `json:"lock_delay_ms,omitempty"`
	RequestID   string   `json:"request_id,omitempty"`
}

// AcquireAllResponse is the answer to PathAcquireAll.
type AcquireAllResponse struct {
	Locks []Lease `json:"locks"`
}

// SessionOverview is a session as an overview shows it: the session and
// the keys of its locks, sorted, at most MaxOverviewSessionKeys of them
// (Session.Locks counts them all). Under ACLs only the keys the caller
// may read are listed and counted, and Waiting is left out.
type SessionOverview struct {
	Session
	Keys []string `json:"keys"`
}

// Limits of the sessions in an overview.
const (
	MaxOverviewSessions    = 100
	MaxOverviewSessionKeys = 20
)
