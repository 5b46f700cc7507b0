package client

import (
	"time"

	"github.com/fencelock/fencelock/client/internal/keepalive"
)

// LastErr exposes the last transient extension failure to tests, so they
// can wait for it as an event instead of sleeping.
func (l *Lease) LastErr() error { return l.keep.LastErr() }

// Framed reports whether the client holds a framed connection to addr (a
// base URL), so tests can tell frames from the HTTP fallback.
func (c *Client) Framed(addr string) bool { return c.conns.HasFramed(addr) }

// AttemptTimeout exposes how long one extension waits for one node, so a
// test on a fake clock can move time by exactly that much.
func (l *Lease) AttemptTimeout() time.Duration { return l.keep.AttemptTimeout() }

// HedgeDelay is how long an attempt goes unanswered before the next
// address is asked beside it.
func (l *Lease) HedgeDelay() time.Duration { return l.keep.HedgeDelay() }

// FramedConns is how many framed connections the client holds to addr (a
// base URL).
func (c *Client) FramedConns(addr string) int { return c.conns.FramedConns(addr) }

// LastErr is the session's last transient failure since its last
// confirmation.
func (s *Session) LastErr() error { return s.keep.LastErr() }

// BinaryCalls reports whether the client's framed connection to addr (a
// plain http:// base URL) has learnt that its server takes path as a
// binary call.
func (c *Client) BinaryCalls(addr, path string) bool { return c.conns.BinaryCalls(addr, path) }

// Budget exposes the keep-alive's timing for ttl, as offsets from the send
// of the last confirmed extension: extend every (less jitter), give up,
// stop by.
func Budget(ttl time.Duration) (every, giveUp, stopBy time.Duration) {
	b := keepalive.BudgetFor(ttl)
	return b.Every, b.GiveUp, b.StopBy
}

// FailoverAllowance is the keep-alive's, for tests.
const FailoverAllowance = keepalive.FailoverAllowance

// RetryDelayMax is the longest pause between two rounds of failed
// extensions for ttl.
func RetryDelayMax(ttl time.Duration) time.Duration { return keepalive.RetryDelayMax(ttl) }

// Waiting reports whether the keep-alive goroutine waits on its clock
// alone: asleep (a pause, or the next due time), or with an attempt out at
// an address in hanging, which will not answer before its timeout. A test
// that moves a fake clock only then never ages an attempt that a server
// is answering.
func (l *Lease) Waiting(hanging ...string) bool { return l.keep.Waiting(hanging...) }
