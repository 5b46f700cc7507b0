// Package locktable is fencelock's lock table: leases on keys, one global
// fencing-token counter, and a FIFO wait queue per key.
//
// The table is a pure, deterministic state machine. It never reads a clock,
// starts no goroutines, does no I/O and is not safe for concurrent use; the
// caller passes the current time (now) into every call and serialises calls.
// Two tables fed the same calls with the same arguments end in the same state
// and encode to the same bytes, which is what lets the replicated state
// machine apply a log of calls on every node.
//
// The semantics, exactly:
//
//  1. A lease is alive while now < expiry. At now >= expiry it has expired.
//  2. Acquire(key, holder, now, ttl) grants when the key has no lease, its
//     lease has expired, or the same holder holds it (a renewal). Every grant
//     takes a NEW token from one counter shared by all keys: the first token
//     is 1 and each grant adds 1. A renewal's new token supersedes the old
//     one. A refusal (ErrHeld) changes nothing.
//  3. Release(key, holder, now) releases only a lease that holder holds and
//     that is still alive; anything else is a no-op that answers false.
//  4. IsValidToken(key, token) is true iff the key's current record carries
//     exactly that token (it takes no time, as in the seed exercise);
//     Check(key, token, now) is the same and also false once expired.
//  5. Extend(key, holder, token, now, ttl) moves the expiry of the live
//     current grant (holder, token) to now+ttl and keeps its token.
//     Renew(key, holder, now, ttl) is the renewal of rule 2 for a holder
//     whose lease is alive, and ErrNotHeld for anyone else.
//  6. Wait is Acquire that, when refused, joins the key's FIFO queue. When a
//     lease is released or found expired, the head waiter is granted in the
//     same call, so there is one wake-up per hand-off and newcomers cannot
//     barge past the queue.
//  7. Tick(now) expires every lease whose expiry has passed, hands each key
//     to its head waiter, and drops waiters whose deadline has passed. Only a
//     server calls it; the seed's calls never need it.
//
// Bad input (empty or oversized key or holder, ttl <= 0) is refused with an
// *InputError and changes nothing. Nothing in this package panics on input.
package locktable
