// Package fsm is fencelock's replicated state machine: the command encoding
// and the state machine around the lock table, in plain values (index,
// term, data; snapshots on plain readers and writers), so that either raft
// engine, a test, a replay and the simulation drive the same code. It
// imports no raft engine.
//
// The contract, in order:
//
//  1. The leader builds a Command, stamps it with the cluster time (Now)
//     and proposes Encode(cmd) through its engine.
//  2. Every node applies committed entries in log order. Apply decodes the
//     entry and runs it against the table at the effective time
//     max(cmd.Now, the largest time applied so far), so cluster time never
//     goes backwards in the log even when two proposals were stamped in one
//     order and enqueued in the other.
//  3. Apply answers a *Result (never nil). Refusals and bad commands are
//     answered in Result.Err; they change nothing.
//  4. Table events (grants, releases, expiries, dropped waiters) are passed
//     to the observer synchronously, with the log index of the entry that
//     caused them, so a server can wake its waiters after commit.
//  5. A write that carries a request id is remembered with its result for a
//     bounded time and count; a repeat is answered from memory
//     (Result.Duplicate) and changes nothing, so clients can retry safely.
//  6. Snapshot copies the state under the lock and its WriteTo writes it;
//     Restore replaces all state with the snapshot's.
//
// The package reads no clock, starts no goroutines and does no network I/O.
package fsm
