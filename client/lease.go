package client

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/fencelock/fencelock/client/internal/keepalive"
)

// Lease is a held lock that keeps itself alive. One goroutine per Lease
// extends it, keeping its token: every TTL/3 (less up to 10% jitter), or
// more often for a TTL under about 2.7 s, so that 1.5 s is left for a
// failover between an extension's due time and the give-up point, and
// never more often than every TTL/8. When no extension has been confirmed
// by the give-up point (Deadline), 0.89×TTL after the send time of the
// last confirmed one on the client's clock, the lease is lost: Done is
// closed and Err says why. The server cannot have handed the key to anyone
// else before TTL after that send, so whoever watches Done has the stop
// grace, TTL/10, to stop what it does under the lease before StopBy, which
// keeps TTL/100 as a bound on clock-rate error (DESIGN.md §4,
// docs/RELIABILITY.md).
//
// Work done under a lease should carry Token to the resource, whose fence
// refuses stale tokens: a process can be paused at any instruction, even
// right after checking Done.
type Lease struct {
	c           *Client
	keep        *keepalive.Keeper
	key, holder string
	token       uint64
	ttl         time.Duration

	mu   sync.Mutex
	lock Lock // the server's last answer
}

// Key returns the locked key.
func (l *Lease) Key() string { return l.key }

// Holder returns the holder name the lease was granted to.
func (l *Lease) Holder() string { return l.holder }

// Token returns the fencing token. Extensions keep it.
func (l *Lease) Token() uint64 { return l.token }

// TTL returns the lease TTL.
func (l *Lease) TTL() time.Duration { return l.ttl }

// Done is closed when the lease ends: lost, or released.
func (l *Lease) Done() <-chan struct{} { return l.keep.Done() }

// Context is cancelled when the lease ends, with Err as its cause
// (context.Cause). It carries the values of the ctx given to Acquire.
func (l *Lease) Context() context.Context { return l.keep.Context() }

// Err is nil while the lease is held. Afterwards it is ErrReleased, or a
// *LostError matching ErrLeaseLost and the reason: ErrExpired (no extension
// was confirmed in time, e.g. the process was paused), ErrUnreachable or
// ErrUnavailable (the extensions that were tried failed), or ErrNotHeld (the
// server refused an extension: the lease had already ended there).
func (l *Lease) Err() error { return l.keep.Err() }

// Deadline is when the lease will be declared lost unless an extension is
// confirmed first: 0.89×TTL (TTL less StopGrace and the clock allowance)
// after the send time of the last confirmed one.
func (l *Lease) Deadline() time.Time { return l.keep.Deadline() }

// StopBy is when everything done under the lease must have stopped: TTL
// less TTL/100 after the send time of the last confirmed grant or
// extension, on the client's clock. The TTL/100 bounds how much faster the
// server's clock may run than the client's, and the moment a kill takes to
// land. Deadline is StopGrace (TTL/10) before it; `fencelock lock` sends
// its command SIGTERM at Deadline and SIGKILL at StopBy.
func (l *Lease) StopBy() time.Time { return l.keep.StopBy() }

// Extended returns a channel that is closed when the next extension is
// confirmed, when Deadline, StopBy and HeldUntil have moved on. It is not
// closed when the lease ends (Done is); call it again for the one after.
func (l *Lease) Extended() <-chan struct{} { return l.keep.Extended() }

// HeldUntil is the earliest instant at which the server can consider the
// lease expired and grant the key to someone else: TTL after the send time
// of the last confirmed grant or extension, on the client's clock, if
// client and server clocks run at the same rate (StopBy allows for a
// difference).
func (l *Lease) HeldUntil() time.Time { return l.keep.HeldUntil() }

// Lock returns the server's last account of the lease.
func (l *Lease) Lock() Lock {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lock
}

// Release stops the keep-alive, waits for its goroutine and gives the lock
// back. It returns nil when the server released it; the loss error when the
// lease had already been lost (the release is still sent, in case the server
// still holds it); an error matching ErrNotHeld when the server no longer had
// it. Calls after the first return nil.
func (l *Lease) Release(ctx context.Context) error {
	lost, first := l.keep.Stop(ErrReleased)
	if !first {
		return nil
	}
	ok, err := l.c.Release(ctx, l.key, l.holder, l.token)
	switch {
	case lost != nil:
		return lost
	case err != nil:
		return err
	case !ok:
		return fmt.Errorf("%w: the server had no live lease on %q with token %d to release", ErrNotHeld, l.key, l.token)
	}
	return nil
}
