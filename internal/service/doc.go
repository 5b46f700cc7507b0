// Package service is fencelock's lock service: the operations (Acquire
// and its waits, Renew, Extend, Release, Check, Get, List, sessions,
// multi-key acquire, semaphores and read/write locks, watches, the
// overview, the ACL tables, cluster membership) as typed methods that take
// the api package's requests and answer its answers or an *Error. They
// know nothing of a transport or of how a caller is authenticated
// (internal/httpapi and internal/auth do); the operations that count
// against a principal's quotas take its name as an argument, and a
// context that ends is a caller gone away.
//
// The service runs over the replicated state machine (internal/fsm)
// through replica.Replicator: the raft node in production, an in-memory log
// (internal/replica/replicatest) in tests, on an injected clock. It is the
// leader's side of the cluster too: the cluster clock, the expiry timer,
// the takeover duties.
//
// How a write travels:
//
//  1. The operation validates the request (invalid_argument naming the
//     field on bad input).
//  2. It stamps the command with cluster time from the leader's clock and
//     proposes it (replica.Replicator.Propose); it answers only after the
//     entry is committed to the durable log and applied.
//  3. A waiting acquire that is queued registers (key, holder) and sleeps
//     until the state machine reports its grant or its dropped wait; events
//     older than its own Wait entry are ignored.
//
// The cluster clock: when this node becomes leader it waits for every
// committed entry to be applied (a barrier) and resumes cluster time from
// the last applied time, advancing it on the local monotonic clock
// (Config.Clock: tests drive a fake one). So a restart or failover neither shortens a lease nor resets it to a full TTL;
// it extends live leases by at most the time the cluster had no leader plus
// Config.ClockCheckpoint: while anything is held or queued, the leader
// commits a Tick whenever that long has passed without an entry, so the log
// never lags cluster time by more.
//
// Replicated mode: the node may be one voter of a cluster. Only the ready leader serves; every other node
// answers 503 not_leader naming the leader's client address, which leaders
// record in the replicated members table on takeover and followers
// announce for themselves. Reads ask a quorum first (VerifyLeader), so a
// deposed leader never answers from stale state. Leader changes reuse the
// takeover above: barrier, clock resumed from the last applied time,
// orphaned waiters cancelled. Request ids are remembered in the state
// machine, so a retry sent to the next leader answers the original result.
//
// Membership lives in internal/membership: joins, announcements and
// removals with their probes and quorum check, the members view with
// every member's health, removed and joining nodes, and where the leader
// is. The cluster calls here (Identity, Members, Join, Announce, Remove,
// Removed) only hand over to it and answer its errors as *Error; it asks
// the service back whether this node is the ready leader, whether it
// takes writes, and to propose a command stamped with cluster time.
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
package service
