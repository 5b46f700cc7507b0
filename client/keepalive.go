package client

import (
	"context"
	"errors"
	"syscall"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/client/internal/keepalive"
	"github.com/fencelock/fencelock/client/internal/transport"
)

// A Lease and a Session keep themselves alive with one keep-alive each
// (package keepalive: the cadence, the attempts across the nodes, the
// give-up point). What it needs of the client is here: the clock, the
// address book, the jitter, and what the client's errors mean to it.

// StopGrace is how long a holder has to stop its work once a lease's Done
// is closed, before its StopBy: TTL/10, the time `fencelock lock` gives its
// command between SIGTERM and SIGKILL.
func StopGrace(ttl time.Duration) time.Duration { return keepalive.StopGrace(ttl) }

// keepAlive starts the keep-alive of a lease or a session of ttl, dated
// from sent: send is one extension to one address, lost names a loss.
func (c *Client) keepAlive(ctx context.Context, ttl time.Duration, sent time.Time, what string,
	send func(ctx context.Context, addr string) (confirm func(), err error), lost func(reason error) error) *keepalive.Keeper {
	return keepalive.Start(ctx, keepalive.Config{Clock: c.clock, TTL: ttl, Sent: sent, What: what, Addrs: c.addrs,
		Jitter: c.rnd.n, Send: send, Judge: judgeExtension, Lost: lost, Expired: ErrExpired, Unreachable: ErrUnreachable})
}

// judgeExtension says what a failed extension sent to addr means: a node
// that names the leader sends the next attempt there; a node unreachable,
// unavailable (not_leader naming nobody among them), failing inside or
// out of disk space is
// tried again until the deadline; any other answer (ErrNotHeld: the lease
// had ended on the server) loses the lease at once.
func judgeExtension(addr string, err error) keepalive.Verdict {
	var ae *APIError
	switch {
	case errors.As(err, &ae) && ae.Code == api.CodeNotLeader && ae.Leader != "":
		if u, perr := transport.LeaderURL(addr, ae.Leader); perr == nil && u != addr {
			return keepalive.Verdict{Leader: u}
		}
		return keepalive.Verdict{}
	case errors.Is(err, ErrUnreachable), errors.Is(err, ErrUnavailable), errors.Is(err, ErrInternal), errors.Is(err, ErrNoSpace):
		// A node that knows no leader, or that is down (nothing listens:
		// the connection was refused), tells nothing about the silent
		// ones: a round of only such answers asks them again.
		down := errors.Is(err, syscall.ECONNREFUSED)
		return keepalive.Verdict{NoLeader: errors.As(err, &ae) && ae.Code == api.CodeNotLeader || down}
	}
	return keepalive.Verdict{Lost: true}
}
