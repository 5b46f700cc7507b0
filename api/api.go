package api

import (
	"net/http"
	"strings"
	"time"
)

// Paths of the API. Lock calls are POST (writes) or GET (reads); see Method.
const (
	PathAcquire     = "/v1/acquire"
	PathRenew       = "/v1/renew"
	PathExtend      = "/v1/extend"
	PathExtendBatch = "/v1/extend-batch"
	PathRelease     = "/v1/release"
	PathCheck       = "/v1/check"
	PathLock        = "/v1/lock"
	PathLocks       = "/v1/locks"

	PathHealth  = "/healthz"
	PathReady   = "/readyz"
	PathMetrics = "/metrics"

	PathMembers  = "/v1/cluster/members"
	PathJoin     = "/v1/cluster/join"
	PathRemove   = "/v1/cluster/remove"
	PathAnnounce = "/v1/cluster/announce"
	PathIdentity = "/v1/cluster/identity"
)

// Priority reports whether a call on path (with an optional ?query)
// keeps leases alive or gives them up: extends and releases. On a framed
// connection these have a budget of their own on both ends, so that a
// window full of waits cannot hold them back and cost a holder its lease.
func Priority(path string) bool {
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	switch path {
	case PathExtend, PathExtendBatch, PathRelease:
		return true
	}
	return false
}

// Query parameters of the GET calls.
const (
	QueryKey    = "key"    // check, lock
	QueryToken  = "token"  // check
	QueryPrefix = "prefix" // locks
	QueryLimit  = "limit"  // locks
	QueryAfter  = "after"  // locks: the last key of the previous page; the page starts after it
)

// ContentType is the media type of every body, both ways.
const ContentType = "application/json"

// Limits. A request outside them is refused with CodeInvalid naming the
// field; nothing changes.
const (
	MinTTL          = 100 * time.Millisecond
	MaxTTL          = 24 * time.Hour
	MaxWait         = time.Hour
	MaxBodyBytes    = 64 << 10 // one request body
	MaxKeyLen       = 1024     // bytes, also of a list prefix
	MaxHolderLen    = 256      // bytes
	MaxRequestIDLen = 64       // bytes
	MaxBatch        = 1000     // leases in one extend-batch
	DefaultLimit    = 1000     // locks listed when limit is not given
	MaxLimit        = 10000
	MaxNodeIDLen    = 128 // bytes of a member id in join and remove
	MaxAddrLen      = 256 // bytes of an address in join
)

// Error codes: the code field of every Error.
const (
	CodeInvalid          = "invalid_argument"     // 400: a field is missing, malformed or out of range
	CodeHeld             = "held"                 // 409: another holder has a live lease (or a wait elapsed)
	CodeNotHeld          = "not_held"             // 409: not the live holder of this token
	CodeNotFound         = "not_found"            // 404: no live lease, no such route, no such member
	CodeAlreadyExists    = "already_exists"       // 409: a principal of that name exists; ask again with replace
	CodeMethodNotAllowed = "method_not_allowed"   // 405
	CodeNotLeader        = "not_leader"           // 503: send it to Error.Leader
	CodeUnavailable      = "unavailable"          // 503: no leader, shutting down, not ready
	CodeInternal         = "internal"             // 500
	CodeNoSpace          = "no_space"             // 507: the log cannot write for lack of disk space
	CodeTooManyOpenFiles = "too_many_open_files"  // 503: the log cannot open a file
	CodeTooManyConns     = "too_many_connections" // 503: the server is at its connection cap
	CodeTooManyWaiters   = "too_many_waiters"     // 429: the key's wait queue, or all queues, are at their limit; nothing changed
	CodeUnauthenticated  = "unauthenticated"      // 401: auth is on and the call carries no known credential
	CodePermissionDenied = "permission_denied"    // 403: the caller's policies do not allow this call
	CodeQuotaExceeded    = "quota_exceeded"       // 429: the caller's principal is at a quota (Error.Quota names it); nothing changed

	// Membership refusals (409 unless noted); nothing changed.
	CodeNoRaft          = "no_raft_transport" // this node cannot add nodes
	CodeNodeUnreachable = "node_unreachable"  // the new node does not answer at its addresses
	CodeWrongNode       = "wrong_node"        // it answers as another node or at another raft address
	CodeWrongCluster    = "wrong_cluster"     // it belongs to another cluster
	CodeWrongEngine     = "wrong_engine"      // it runs another replication engine
	CodeNoQuorum        = "no_quorum"         // the new configuration would have no reachable quorum
	CodeChangeUnknown   = "change_unknown"    // 503: the change may or may not have applied

	// CodeRemoved (503): the answering node has been removed from the
	// cluster; it serves nothing. Send the call to another node (clients
	// that know several move on, as on any 503).
	CodeRemoved = "removed"
)

// Status is the HTTP status a code is answered with.
func Status(code string) int {
	if st, ok := sessionStatus(code); ok {
		return st
	}
	if st, ok := browserStatus(code); ok {
		return st
	}
	switch code {
	case CodeInvalid:
		return http.StatusBadRequest
	case CodeUnauthenticated:
		return http.StatusUnauthorized
	case CodePermissionDenied:
		return http.StatusForbidden
	case CodeKindMismatch:
		return http.StatusConflict
	case CodeHeld, CodeNotHeld, CodeAlreadyExists, CodeNoRaft, CodeNodeUnreachable, CodeWrongNode, CodeWrongCluster, CodeWrongEngine, CodeNoQuorum:
		return http.StatusConflict
	case CodeNotFound:
		return http.StatusNotFound
	case CodeMethodNotAllowed:
		return http.StatusMethodNotAllowed
	case CodeNoSpace:
		return http.StatusInsufficientStorage
	case CodeTooManyWaiters, CodeTooManyWatchers, CodeQuotaExceeded:
		return http.StatusTooManyRequests
	case CodeCompacted:
		return http.StatusGone
	case CodeNotLeader, CodeUnavailable, CodeTooManyOpenFiles, CodeTooManyConns, CodeChangeUnknown, CodeRemoved:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// Error is the body of every answer that is not 2xx.
type Error struct {
	Message string `json:"error"`
	Code    string `json:"code"`
	// Field names the request field at fault (CodeInvalid).
	Field string `json:"field,omitempty"`
	// Holder and RemainingMs name the lease in the way (CodeHeld).
	Holder      string `json:"holder,omitempty"`
	RemainingMs *int64 `json:"remaining_ms,omitempty"`
	// Leader is the leader's client address, when known (CodeNotLeader).
	Leader string `json:"leader,omitempty"`
	// Kind and Permits say what the key is (CodeKindMismatch).
	Kind    string `json:"kind,omitempty"`
	Permits int    `json:"permits,omitempty"`
	// CompactRevision is the oldest revision a watch may start after
	// (CodeCompacted).
	CompactRevision *Revision `json:"compact_revision,omitempty"`
	// Quota names the quota a principal is at (CodeQuotaExceeded, and
	// CodeTooManyWatchers for one caller's watches): one of the Quota
	// constants.
	Quota string `json:"quota,omitempty"`
}

// The quotas of one principal (docs/OPERATIONS.md, "Limits").
const (
	QuotaSessions = "sessions" // open sessions
	QuotaLocks    = "locks"    // leases held plus places in wait queues
	QuotaWaiters  = "waiters"  // places in wait queues
	// QuotaKeyWaiters: places in one key's wait queue, so that one
	// principal cannot take a key's whole queue.
	QuotaKeyWaiters = "key_waiters"
	QuotaWatches    = "watches" // watches open on one node
)

// Lease is one grant: who holds a key, under which fencing token, for how
// long. RemainingMs is measured on cluster time when the answer was made.
type Lease struct {
	Key         string `json:"key"`
	Holder      string `json:"holder"`
	Token       uint64 `json:"token"`
	TTLMs       int64  `json:"ttl_ms"`
	RemainingMs int64  `json:"remaining_ms"`
	Session     uint64 `json:"session,omitempty"` // the session it is held under
	// A semaphore's or read/write lock's holder: the key's
	// kind, a semaphore's permits, a read/write holder's mode. Absent
	// for exclusive leases. GET /v1/lock on such a key answers its oldest
	// holder with every live holder in Holders.
	Kind    string  `json:"kind,omitempty"`
	Permits int     `json:"permits,omitempty"`
	Mode    string  `json:"mode,omitempty"`
	Slot    int     `json:"slot,omitempty"` // a semaphore holder's permit, 1..Permits
	Holders []Lease `json:"holders,omitempty"`
	// Waiting is how many wait in the key's queue (waiters of every
	// kind: exclusive, a permit, a read or a write) and NextWaiter the
	// head of it; GET /v1/lock and /v1/locks answer them, absent when
	// nobody waits. A key of several holders gives them with its first
	// lease (the oldest token) only, so that summing Waiting over a list
	// counts each waiter once.
	Waiting    int     `json:"waiting,omitempty"`
	NextWaiter *Waiter `json:"next_waiter,omitempty"`
}

// AcquireRequest is POST /v1/acquire; the answer is a Lease. WaitMs 0 tries
// once; more queues in the key's FIFO for that long. A request re-sent
// under the same RequestID (after a lost answer or a failover) is answered
// with the grant it got, not given a new one.
type AcquireRequest struct {
	Key       string `json:"key"`
	Holder    string `json:"holder"`
	TTLMs     int64  `json:"ttl_ms"`
	WaitMs    int64  `json:"wait_ms,omitempty"`
	RequestID string `json:"request_id,omitempty"`
	// Session takes the lock under a session; TTLMs is then
	// ignored. LockDelayMs, up to MaxLockDelay, keeps the key granted to
	// nobody for that long after the lease expires (not after a release).
	Session     uint64 `json:"session,omitempty"`
	LockDelayMs int64  `json:"lock_delay_ms,omitempty"`
	// Permits > 0 asks for one of that many permits of a semaphore;
	// Mode "read" or "write" for a read/write lock.
	Permits int    `json:"permits,omitempty"`
	Mode    string `json:"mode,omitempty"`
}

// RenewRequest is POST /v1/renew: the live holder gets a new token and a
// fresh TTL. The answer is a Lease.
type RenewRequest struct {
	Key       string `json:"key"`
	Holder    string `json:"holder"`
	TTLMs     int64  `json:"ttl_ms"`
	RequestID string `json:"request_id,omitempty"`
}

// ExtendRequest is POST /v1/extend: the live holder of Token gets a fresh
// TTL under the same token. The answer is a Lease.
type ExtendRequest struct {
	Key       string `json:"key"`
	Holder    string `json:"holder"`
	Token     uint64 `json:"token"`
	TTLMs     int64  `json:"ttl_ms"`
	RequestID string `json:"request_id,omitempty"`
}

// BatchItem names one lease of an extend-batch.
type BatchItem struct {
	Key   string `json:"key"`
	Token uint64 `json:"token"`
}

// ExtendBatchRequest is POST /v1/extend-batch: Extend for up to MaxBatch
// leases of one holder in one log entry. The answer is ExtendBatchResponse.
type ExtendBatchRequest struct {
	Holder    string      `json:"holder"`
	TTLMs     int64       `json:"ttl_ms"`
	Leases    []BatchItem `json:"leases"`
	RequestID string      `json:"request_id,omitempty"`
}

// BatchResult is one item's outcome, in request order: a Lease when OK,
// else the code and message Extend would have answered.
type BatchResult struct {
	Key   string `json:"key"`
	Token uint64 `json:"token"`
	OK    bool   `json:"ok"`
	Lease *Lease `json:"lease,omitempty"`
	Code  string `json:"code,omitempty"`
	Error string `json:"error,omitempty"`
}

// ExtendBatchResponse answers an ExtendBatchRequest.
type ExtendBatchResponse struct {
	Results []BatchResult `json:"results"`
}

// ReleaseRequest is POST /v1/release. Token 0 releases whatever Holder
// holds on Key; otherwise only that grant.
type ReleaseRequest struct {
	Key       string `json:"key"`
	Holder    string `json:"holder"`
	Token     uint64 `json:"token,omitempty"`
	RequestID string `json:"request_id,omitempty"`
}

// ReleaseResponse answers a release; Released is false when there was
// nothing of Holder's to release (already expired or released).
type ReleaseResponse struct {
	Released bool `json:"released"`
}

// CheckResponse answers GET /v1/check?key=K&token=T: whether T is the live
// grant on K now.
type CheckResponse struct {
	Key   string `json:"key"`
	Token uint64 `json:"token"`
	Valid bool   `json:"valid"`
}

// ListResponse answers GET /v1/locks?prefix=P&limit=N&after=A, in key
// order: at most N live leases whose keys start with P and sort after A.
// To read the next page, send the last key answered as A; a page shorter
// than N is the last. GET /v1/lock?key=K answers a single Lease or
// CodeNotFound.
type ListResponse struct {
	Locks []Lease `json:"locks"`
}

// StatusResponse answers /healthz ("ok") and /readyz ("ready").
type StatusResponse struct {
	Status string `json:"status"`
}

// Member is one server of the raft configuration.
type Member struct {
	ID         string `json:"id"`
	RaftAddr   string `json:"raft_addr"`
	ClientAddr string `json:"client_addr,omitempty"`
	Suffrage   string `json:"suffrage"` // Voter, Nonvoter or Staging
	Leader     bool   `json:"leader"`
	// State is the member's health as the leader sees it
	// (MembersResponse.HealthFrom): MemberLeader, MemberHealthy,
	// MemberUnreachable or MemberUnknown. LastContactMs is how long ago
	// the leader last heard from it, LagEntries how many log entries it
	// was behind the leader's last one then; both are absent for the
	// leader itself and for a member it has never heard from.
	State         string  `json:"state"`
	LastContactMs *int64  `json:"last_contact_ms,omitempty"`
	LagEntries    *uint64 `json:"lag_entries,omitempty"`
}

// Member states (Member.State).
const (
	// MemberLeader: the leader, answering for itself or named by a node
	// that hears from it.
	MemberLeader = "leader"
	// MemberHealthy: it answered the leader's last heartbeats.
	MemberHealthy = "healthy"
	// MemberUnreachable: the leader has not heard from it for longer than
	// MembersResponse.UnreachableAfterMs (or, for a leader the answering
	// node has stopped hearing from, a heartbeat timeout).
	MemberUnreachable = "unreachable"
	// MemberUnknown: no leader's view of it could be had, or the leader
	// has just been elected and has not heard from it yet.
	MemberUnknown = "unknown"
)

// MembersResponse answers GET /v1/cluster/members from the answering
// node's view: the configuration, the leader, the node's own progress,
// and each member's health as the leader sees it. A follower asks the
// leader for its view; a leader it has not heard from for a heartbeat
// timeout is not named as the leader (raft keeps naming a dead one until
// a new one is elected) and is shown unreachable. Any node answers at
// once, leader or not: when it hears from no leader (NoLeader), or the
// leader does not answer it within UnreachableAfterMs, with its own view
// (Local).
type MembersResponse struct {
	Leader        string   `json:"leader"`      // leader's id, "" if none known
	LeaderAddr    string   `json:"leader_addr"` // leader's client address
	Members       []Member `json:"members"`
	Node          string   `json:"node"`  // the answering node
	Ready         bool     `json:"ready"` // it leads, has caught up, and a quorum confirms it
	AppliedIndex  uint64   `json:"applied_index"`
	AppliedTimeMs int64    `json:"applied_time_ms"` // cluster time of its last applied entry
	ClusterID     string   `json:"cluster_id"`
	// HealthFrom is the leader whose view the members' State,
	// LastContactMs and LagEntries are; "" when none could be had (no
	// leader, or it did not answer the answering node).
	HealthFrom string `json:"health_from"`
	// UnreachableAfterMs: a member the leader has not heard from for
	// longer is MemberUnreachable (twice the heartbeat timeout).
	UnreachableAfterMs int64 `json:"unreachable_after_ms"`
	// Removed: the answering node has been removed from the cluster, and
	// Members is the configuration as it last saw it, without itself.
	// It serves nothing (every other call answers CodeRemoved).
	Removed bool `json:"removed,omitempty"`
	// Role is the answering node's raft role now (RoleLeader,
	// RoleFollower, RoleCandidate or RoleShutdown) and Term its raft
	// term. Servers before issue 44 leave both out.
	Role string `json:"role,omitempty"`
	Term uint64 `json:"term,omitempty"`
	// NoLeader: the answering node neither leads with a quorum's
	// confirmation nor hears from a leader, so nothing can be granted,
	// extended or released until a quorum of the voters elects one: the
	// cluster has lost its quorum, or an election is under way. The
	// members' health is then the answering node's own view (Local).
	// 'fencelock cluster members' says so and exits 3. A server before
	// issue 44 answers 503 instead, or leaves it out with Leader "".
	NoLeader bool `json:"no_leader,omitempty"`
	// Local: the members' State and LastContactMs are the answering
	// node's own view, not a leader's (HealthFrom is ""), because no
	// leader's view could be had: MemberHealthy means this node heard
	// from the member within UnreachableAfterMs, MemberUnreachable that
	// it last did longer ago (LastContactMs says when), MemberUnknown
	// that it never has. A follower hears only from its leader and from
	// the voters that answer it in an election; a node that led heard
	// from every member that answered it. The answering node itself is
	// MemberHealthy, and the leader it still hears from MemberLeader.
	Local bool `json:"local,omitempty"`
}

// Raft roles (MembersResponse.Role).
const (
	RoleLeader    = "leader"
	RoleFollower  = "follower"
	RoleCandidate = "candidate"
	RoleShutdown  = "shutdown"
)

// JoinRequest is POST /v1/cluster/join (and /announce, by which a node
// records its own client address).
type JoinRequest struct {
	ID         string `json:"id"`
	RaftAddr   string `json:"raft_addr"`
	ClientAddr string `json:"client_addr"`
}

// Joined names the node a join added and the suffrage it has now.
type Joined struct {
	ID       string `json:"id"`
	Suffrage string `json:"suffrage"`
}

// JoinResponse is the members answer after the change. Message says why
// a node that joined is not (yet) a voter.
type JoinResponse struct {
	MembersResponse
	Joined  Joined `json:"joined"`
	Message string `json:"message,omitempty"`
}

// RemoveRequest is POST /v1/cluster/remove.
type RemoveRequest struct {
	ID string `json:"id"`
}

// RemoveResponse answers a removal.
type RemoveResponse struct {
	Removed string `json:"removed"`
}

// Identity answers GET /v1/cluster/identity: who a node is, which cluster
// it belongs to ("" for a node no cluster has added yet) and how far it
// has applied the log. A leader asks it of a node before adding it.
type Identity struct {
	Node         string `json:"node"`
	RaftAddr     string `json:"raft_addr"`
	ClientAddr   string `json:"client_addr"`
	ClusterID    string `json:"cluster_id"`
	AppliedIndex uint64 `json:"applied_index"`
	Raft         bool   `json:"raft"` // false: no raft transport (started without --raft)
	// Engine is the node's replication engine, "hashicorp" or "etcd"
	// (server --engine): nodes of two engines cannot be one cluster.
	// Nodes from before it was reported leave it out.
	Engine string `json:"engine,omitempty"`
}

// Ms is d in whole milliseconds, as the _ms fields carry it.
func Ms(d time.Duration) int64 { return d.Milliseconds() }

// Duration is an _ms field as a time.Duration.
func Duration(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }
