// Package server runs fencelock's lock service: a raft node whose state
// machine is the lock table, the leader-only timers that expire leases, the
// service's operations, the HTTP/JSON API of docs/API.md over them, and
// its metrics.
//
// The files, by what they own:
//
//	service_lock.go     the lock operations: Acquire, Renew, Extend, ExtendBatch,
//	                    Release, Check, Get, List, CheckReady
//	service_wait.go     a waiting Acquire: hand-off, crossing grants, giving up
//	service_cluster.go  Identity, Members, Join, Announce, Remove
//	membership.go       the probes and quorum checks behind a membership change
//	errors.go           Error, the one error type of the operations
//	validate.go         request field checks, in the API's terms
//	http.go             the HTTP adapter, its router and the Authorizer seam
//	server.go           Server: New, Serve, Close
//	leader.go           cluster clock, proposals, takeover, the expiry timer
//	cluster.go          not_leader answers, this node's record, announcements
//	waiters.go          the requests waiting on queue places
//	node.go, config.go  Config and its Validate; the raft node and its stores
//	clock.go            the Clock lease time is measured by (Config.Clock)
//	metrics.go          Prometheus metrics
//	inspect.go          Waiters, a read-only view for tests
//	memory.go           freed memory returned after big snapshots
//	datadir.go, wal*.go, statefile.go, floor.go, checkedlog.go, recover.go
//	                    the durable stores, their checks and their repair
//	connlimit.go, fdlimit_*.go, lock_*.go
//	                    the connection cap, the open-file limit, the data dir lock
//	tls.go, insecure.go TLS on the client port and raft (mutual), its reload;
//	                    loopback only without TLS
//
// The operations are methods of Server that take the api package's
// requests and answer its answers or an *Error; they know nothing of a
// transport, and a context that ends is a caller gone away. The HTTP
// handlers decode, call, encode and map an *Error's code to a status
// (api.Status). The framed protocol (internal/framing) serves the same
// http.Handler, so it is an adapter over the HTTP adapter. Every routed
// request passes Config.Authorizer, if set, before its operation runs.
//
// How a write travels:
//
//  1. The operation validates the request (invalid_argument naming the
//     field on bad input).
//  2. It stamps the command with cluster time from the leader's clock and
//     proposes it with raft.Apply; it answers only after the entry is
//     committed to the durable log and applied (the Apply future).
//  3. A waiting acquire that is queued registers (key, holder) and sleeps
//     until the state machine reports its grant or its dropped wait; events
//     older than its own Wait entry are ignored.
//
// The cluster clock: when this node becomes leader it waits for every
// committed entry to be applied (a barrier) and resumes cluster time from
// the last applied time, advancing it on the local monotonic clock
// (Config.Clock: tests drive a fake one). So a
// restart or failover neither shortens a lease nor resets it to a full TTL;
// it extends live leases by at most the time the cluster had no leader plus
// Config.ClockCheckpoint: while anything is held or queued, the leader
// commits a Tick whenever that long has passed without an entry, so the log
// never lags cluster time by more.
//
// Replicated mode (cluster.go): with RaftAddr and Peers or Join the node
// is one voter of a cluster. Only the ready leader serves; every other node
// answers 503 not_leader naming the leader's client address, which leaders
// record in the replicated members table on takeover and followers
// announce for themselves. Reads ask a quorum first (VerifyLeader), so a
// deposed leader never answers from stale state. Leader changes reuse the
// takeover above: barrier, clock resumed from the last applied time,
// orphaned waiters cancelled. Request ids are remembered in the state
// machine, so a retry sent to the next leader answers the original result.
//
// Expiry: only the leader runs a timer, set to the table's next deadline;
// when it fires the leader proposes a Tick (Consul's session-timer pattern),
// which expires leases and hands keys to waiters in one committed step.
//
// Waiters after a restart or leader change: queue entries restored from the
// log have no connection behind them. A single node cancels every queued
// waiter it does not serve itself before it accepts writes. A new leader of
// a cluster keeps them for orphanGrace, so that clients of the old leader
// re-send the same waits (same request id) and keep their places; then it
// cancels those that did not come back and releases grants the queue made
// to them, unless a re-sent wait was answered with the grant.
//
// A waiter that gives up (disconnect, shutdown) proposes CancelWait. If the
// grant committed first, the operation finds it among its events: a
// disconnected client's grant is released at once by token, so the next
// waiter gets the key; a client still connected is answered with it.
package server
