// Package e2e is fencelock's fault suite: concurrent clients against real
// `fencelock server` processes while one fault runs (kill -9 of the leader,
// of a random node or of every node; SIGSTOP of the leader; a partition
// that isolates the leader; membership changes), every operation recorded
// with its invocation and response time, and every history checked.
//
// The package itself is the checker, so that it can be tested on
// hand-made histories:
//
//  1. Recorder collects Ops: the call (Input), its outcome (Output: OK,
//     Refused or Unknown) and when it was invoked and answered, on the
//     client's monotonic clock.
//  2. CheckLinearizable runs porcupine with Model, a nondeterministic model
//     of the lock table partitioned by key: grants take a token larger than
//     any the key has carried (the global counter seen from one key; the
//     global order is CheckTokens' job), a renewal by the live holder takes
//     a new one, extend needs the live (holder, token), release only by the
//     live holder, check is true iff the live grant has that token, get
//     answers the live grant. An Unknown outcome may or may not have taken
//     effect; porcupine sees it returning at infinity.
//  3. CheckTokens: no token acknowledged twice, on any keys, and a grant
//     answered before another was asked for carries the smaller token.
//  4. CheckHeld: a grant that nothing could have ended is what the healed
//     cluster answers for its key, and no two such grants share a key.
//  5. CheckExpiry: a grant to a second holder is answered no earlier than
//     the first holder's grant was asked for plus its TTL.
//
// Lease expiry is not in the model: the keys checked for linearizability
// have TTLs far longer than a run, and keys whose leases expire within a
// run (Input.Expires) are left to CheckExpiry.
//
// The fault runs themselves are in the package's tests (faults_test.go);
// docs/RELIABILITY.md says how to run a campaign.
package e2e
