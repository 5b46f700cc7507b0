// Package fence is the resource side of fencing: the check that makes a
// fencing token worth having.
//
// A lock service can only promise that it never grants two live leases on one
// key. It cannot stop a holder that was paused past its lease from waking up
// and writing. The protected resource can: it remembers the highest token it
// has honoured and refuses anything older. A Guard does exactly that, per
// resource name:
//
//   - a request without a token is refused (ErrMissingToken): an unfenced
//     code path protects nothing and must fail loudly;
//   - a token lower than the highest honoured one is refused
//     (*StaleTokenError, which matches ErrStaleToken);
//   - an equal token is accepted, so one grant may write many times;
//   - a higher token is accepted and becomes the new highest.
//
// The comparison and the write happen together under the resource's lock
// (Guard.Admit, Guard.Do). Checking first and writing afterwards, anywhere outside the
// resource, leaves a window in which a newer holder can slip in between; that
// window is the bug fencing exists to close.
//
// Fence is that rule as an interface. Guard keeps the marks in memory;
// fence/filefence keeps them in a fsynced file, fence/sqlitefence in the
// same SQLite transaction as the caller's write, and `fencelock fence-proxy`
// puts a file fence in front of an HTTP service nobody can change.
// docs/FENCING.md says which to use where.
//
// Middleware applies any Fence to an HTTP handler using the Fencing-Token
// request header (and Fencing-Key, the lock key, for a fence that
// verifies).
//
// The rule trusts every token it is shown: one made-up token raises a mark
// for good. A Verification makes a fence ask the lock service, once per
// new token per resource, whether the token is a live grant of the lock
// key the resource is bound to by configuration (Verification.Key, a
// KeyMap; client.Verifier asks the cluster); every adapter takes one, and
// asks before it takes the resource, within Verification.Timeout, so that
// a slow service never holds up the current holder. ResetRequest is an
// operator's mending of a mark, which the adapters record. RWFence is the rule of a read/write lock's readers
// and writers; RWGuard keeps it in memory and the durable adapters keep
// it too. fence/fencetest holds them all to the same steps.
package fence
