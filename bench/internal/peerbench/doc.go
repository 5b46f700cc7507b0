// Package peerbench runs fencelock and the lock services a user would pick
// instead — etcd, Redis and ZooKeeper — through the same workloads on the
// same machine (issue 7), and formats one table with ratios to fencelock.
//
// Each system is reached through its usual client and its usual lock recipe,
// behind one small interface:
//
//   - etcd: go.etcd.io/etcd/client/v3 concurrency.Mutex on a Session (a
//     lease with a TTL, kept alive by the client). The fencing token is the
//     create revision of the waiter's lock key, the value the recipe itself
//     compares in IsOwner. Waiters are FIFO by revision; each watches only
//     its predecessor.
//   - Redis: SET NX PX and INCR of one fencing counter inside one Lua
//     script; release and extend compare the stored holder:token in Lua.
//     Waiters poll with jitter, as redsync does, so Redis barges: there is
//     no queue and no FIFO.
//   - ZooKeeper: the ephemeral-sequential recipe; each waiter watches its
//     predecessor. The token is the node's sequence number, monotonic per
//     lock key (plus one: sequences start at 0). The ZooKeeper session is the lease: there is no per-lock
//     extend, which is why Extend reports ErrNotSupported.
//   - fencelock: its wire API (package api, docs/API.md) spoken directly,
//     on one framed connection (internal/framing), as the client package
//     does by default, or with Options.FencelockHTTP over one shared, tuned
//     http.Transport; this package does not import the client package, so
//     the numbers measure the server, not a client library.
//
// Run executes one workload against one system; FormatTable prints results
// side by side. Nothing here logs or panics: every failure is an error, and
// every loop is bounded by the workload's duration and the caller's context.
package peerbench
