package api

// The overview: one read-only answer with what a dashboard shows of a
// node (the web dashboard at /ui/ polls it): a page of live leases, each
// with the head of its wait queue, the last token issued, and the leader's
// counters and hold/wait histograms. The same facts are in /v1/locks and
// /metrics; this answers them together, from one consistent read of the
// table, as JSON, with the sessions those leases are held under (read
// just after).

// PathOverview is GET /v1/overview?prefix=P&limit=N. It is a read: the
// leader answers it (others answer 503 not_leader), and with ACLs on it
// needs read on the prefix; leases below it the caller may not read are
// left out, with their waiters.
const PathOverview = "/v1/overview"

// Limits of an overview. A limit outside 1..MaxOverviewLimit is a 400 on
// "limit"; waiters past MaxOverviewWaiters on one key are counted in
// WaitersTotal but not listed.
const (
	DefaultOverviewLimit = 200
	MaxOverviewLimit     = 1000
	MaxOverviewWaiters   = 50
)

// PathUI is where the server serves its web dashboard (a redirect from
// the path without the slash). The pages are public; every call they make
// is authorized like any other.
const PathUI = "/ui/"

// Overview answers GET /v1/overview.
type Overview struct {
	// Node is the answering node's id.
	Node string `json:"node"`
	// NowMs is the cluster time (ms) the leases were measured at.
	NowMs int64 `json:"now_ms"`
	// LastToken is the last fencing token issued, on any key (0: none yet).
	LastToken uint64 `json:"last_token"`
	// Locks are the live leases whose keys start with the prefix, in key
	// order, at most limit of them; More says the page was cut.
	Locks []LockOverview `json:"locks"`
	More  bool           `json:"more"`
	// Delayed are the keys under the prefix in their lock-delay (a lease
	// that asked for one expired: docs/PRIMITIVES.md), which no lease
	// holds, in key order, each with its wait queue: held back until the
	// delay ends, when its head is granted. At most limit of them;
	// DelayedMore says the list was cut. Absent when there are none.
	Delayed     []DelayedKey `json:"delayed,omitempty"`
	DelayedMore bool         `json:"delayed_more,omitempty"`
	// Queued is the number of waiters in all queues of the table.
	Queued int `json:"queued"`
	// Sessions are the live sessions the listed leases are held under,
	// each once, in the order of its first listed lease, at most
	// MaxOverviewSessions; SessionsOpen counts every open session.
	Sessions     []SessionOverview `json:"sessions"`
	SessionsOpen int               `json:"sessions_open"`
	// Stats are this node's counters, counted while it leads.
	Stats Stats `json:"stats"`
	// StatsHidden: with ACLs on, the caller may not read every key, so
	// the figures of the whole table (LastToken, Queued, SessionsOpen,
	// Stats' counts)
	// are left out as zeros (docs/SECURITY.md, "Least information").
	StatsHidden bool `json:"stats_hidden,omitempty"`
}

// LockOverview is one live lease, how long its token has been held, and
// its wait queue, head first. A key of several holders (a semaphore's
// permits, a read/write lock's readers) gives its queue with its first
// lease only: every waiter is listed once, and the waiters listed add up
// to Overview.Queued, with those of Overview.Delayed, when no queue is
// cut and every queued key is on the page.
type LockOverview struct {
	Lease
	HeldMs       int64    `json:"held_ms"`
	Waiters      []Waiter `json:"waiters"`
	WaitersTotal int      `json:"waiters_total"`
}

// DelayedKey is a key in its lock-delay: nobody holds it, and nobody is
// granted it, its waiters included, for RemainingMs more (cluster time);
// then the head of Waiters is.
type DelayedKey struct {
	Key          string   `json:"key"`
	RemainingMs  int64    `json:"remaining_ms"`
	Waiters      []Waiter `json:"waiters"`
	WaitersTotal int      `json:"waiters_total"`
}

// Waiter is one queued acquire: how long it has waited and how long it
// will wait more before it gives up. Mode is what a read/write lock's
// waiter asks for (ModeRead, ModeWrite); absent on other kinds. Session
// is the session it is to be granted under, when it waits under one.
type Waiter struct {
	Holder   string `json:"holder"`
	WaitedMs int64  `json:"waited_ms"`
	LeftMs   int64  `json:"left_ms"`
	Mode     string `json:"mode,omitempty"`
	Session  uint64 `json:"session,omitempty"`
}

// Stats are the lease counters and histograms of fencelock_grants_total,
// fencelock_lease_ends_total, fencelock_hold_seconds and
// fencelock_wait_seconds (docs/OPERATIONS.md, "Monitoring"), since this
// node started, counted only while it led.
type Stats struct {
	// Grants counts every grant (each issued a new token); Handoffs those
	// of them that went to the head of a wait queue.
	Grants   uint64 `json:"grants"`
	Handoffs uint64 `json:"handoffs"`
	Releases uint64 `json:"releases"`
	Expiries uint64 `json:"expiries"`
	// Hold is grant to release or expiry; Wait is queued to granted.
	Hold Histogram `json:"hold"`
	Wait Histogram `json:"wait"`
}

// Histogram is a distribution in buckets: Counts[i] observations were at
// most BoundsMs[i] (and above BoundsMs[i-1]); the last count, one more
// than there are bounds, is of those above every bound.
type Histogram struct {
	BoundsMs []float64 `json:"bounds_ms"`
	Counts   []uint64  `json:"counts"`
	Count    uint64    `json:"count"`
	SumMs    float64   `json:"sum_ms"`
}
