// Package client is the Go client of fencelock, a lock service whose locks
// are leases and whose every grant carries a fencing token.
//
// It offers two levels.
//
// The plain calls mirror the HTTP API one to one (docs/API.md): Grant (the
// acquire call, try or wait), Renew, Extend, ExtendBatch, Release, Check, Get
// and List, and the cluster calls Members, Join and Remove. They do nothing
// behind your back. On the wire they send and read package api's types.
//
// Lease handles keep a lock alive and tell you when they can no longer
// vouch for it:
//
//  1. Acquire waits in the key's FIFO queue (TryAcquire does not wait) and
//     returns a *Lease with its fencing Token.
//  2. One goroutine per Lease extends it every TTL/3 or so (with jitter;
//     sooner for a TTL under 2.7 s, so that 1.5 s is left for a failover
//     before the give-up point), keeping the token. An extension that
//     fails on one node is sent at once to the next, or to the leader a
//     node names, so a lease rides through a leader change under the same
//     token.
//  3. If no extension has been confirmed by 0.89×TTL after the send time of
//     the last confirmed one (Deadline), measured on the client's monotonic
//     clock, the lease is lost: Done is closed and Err says why
//     (ErrExpired, ErrUnreachable, ErrUnavailable, ErrNotHeld). The server
//     cannot grant the key to anyone else before TTL after that send, so
//     the holder has StopGrace, TTL/10, to stop before StopBy, which keeps
//     TTL/100 as a bound on clock-rate error (docs/RELIABILITY.md).
//  4. Release stops the goroutine, waits for it, and gives the lock back.
//
// A sketch:
//
//	lease, err := c.Acquire(ctx, "jobs/nightly", client.WithTTL(10*time.Second))
//	if err != nil { ... }
//	defer lease.Release(context.Background())
//	err = doWork(lease.Context(), lease.Token()) // the resource checks the token
//
// A Session (NewSession) is a server-side lease that many locks are taken
// under (TryAcquire, Acquire, AcquireAll): one goroutine extends the
// session, and so every lock, on the same cadence; at its Deadline without
// a confirmed extension the session and all its locks' contexts end
// together, as the server releases them together. AcquireAll takes several
// keys at once, all or none.
//
// Losing a lease is a client-side safety stop, not a guarantee: a process
// can be paused right after checking Done. The guarantee comes from the
// resource refusing stale tokens (package fence).
//
// Watch streams the changes on a key or prefix (granted, released,
// expired, waiters joining and leaving) on a channel, each once and in
// revision order, resuming after the last revision on another node or
// after a lost answer; a revision the server no longer keeps ends it with
// ErrCompacted, and WatchList resyncs. Campaign elects a Leader on a lock
// key (FIFO, no herd) that carries its fencing token and stops at its
// Deadline as a Lease does; Observe reports who leads (docs/PRIMITIVES.md).
//
// Errors match sentinels with errors.Is whichever side of the wire refused:
// the server's codes map to ErrHeld, ErrNotHeld, ErrNotFound, ErrInvalid,
// ErrUnavailable, ErrInternal and ErrNoSpace, and a server that cannot be reached is
// ErrUnreachable. *APIError carries the details (the holder in the way, the
// field that was invalid).
//
// Defaults: TTL DefaultTTL (10s); holder DefaultHolder() (hostname-pid-
// random, new per lease); Acquire waits until ctx ends unless WithWait; an
// extension attempt waits TTL/12 for one node (100ms to 2s), the next node
// is tried at once after a failure and beside an attempt unanswered for a
// third of that, and a round of every node is tried again about TTL/30
// later (at most 250ms); any call unanswered for a second has its node
// checked every second (WithWaitCheck) and moves on, same request_id, when
// the check is not answered either, about 2s after the node went silent;
// plain calls retry 6 rounds with jittered back-off from 50ms to 1s; a wait
// longer than the server's hour is sent in rounds that overlap by a minute,
// under one request id, so it keeps its queue place.
//
// A Client takes several addresses: it moves to the next one when a node
// cannot be reached, retries with jittered back-off, and follows a node that
// answers not_leader with the leader's address. Writes carry a request_id so
// retries are applied once.
//
// TLS: WithTLSFiles (a CA, and a client certificate if the server asks for
// one) or WithTLSConfig. https:// addresses, and with either option bare
// host:port ones, carry both framed connections and HTTP over TLS.
package client
