package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencelock/fencelock/api"
)

// keeper is the keep-alive a Lease and a Session share: one goroutine that
// extends on the cadence of budgetFor(ttl) after the send of the last
// confirmed extension (TTL/3, or sooner when that would leave less than a
// failover's time before the give-up point), tries the cluster's
// addresses in turn when one fails, and declares the lease or session
// lost at the give-up point: TTL less a stop grace and a clock allowance
// after that send (DESIGN.md §4, docs/RELIABILITY.md). What differs is what
// one extension sends (send) and what a loss is called (lost).
type keeper struct {
	c     *Client
	clock Clock
	ttl   time.Duration
	// send sends one extension to addr. On success it returns confirm,
	// which the keeper calls, holding mu, once it has accepted the answer.
	send func(ctx context.Context, addr string) (confirm func(), err error)
	// lost is the error that ends the keep-alive for reason.
	lost func(reason error) error
	what string // names the extension in a timeout error

	ctx    context.Context
	cancel context.CancelCauseFunc
	done   chan struct{} // closed when the goroutine has returned

	mu       sync.Mutex
	lastSent time.Time // send time of the last confirmed grant, open or extension
	timer    Timer     // calls expire at the deadline
	lastErr  error     // the last transient failure since the last confirmation
	err      error     // set once ended: the owner's close sentinel, or lost(...)
	next     int       // the next attempt goes this many places after the preferred address
	tries    int       // attempts since the last confirmation
	// silent are the addresses whose attempt got no answer at all since
	// the last confirmation (a frozen or cut-off node). Later rounds skip
	// them while another address is left, so a frozen leader costs one
	// attempt's timeout, not one per round. A node named as the leader is
	// still asked.
	silent map[string]bool
	// noLeader counts the attempts of this round answered not_leader
	// naming nobody. A round of nothing else means the nodes still
	// answering know no leader, so the leader, elected meanwhile, is one
	// of the silent: their marks are dropped and the next round asks
	// them again.
	noLeader int
	// extended is closed at the next confirmation (made on demand by
	// extendedLocked).
	extended chan struct{}
	// What the goroutine is waiting for, for tests that move a fake clock
	// only while it waits on it: sleeping (a pause or the next due time),
	// or the answer of the attempt at attempt.
	sleeping bool
	attempt  string
}

// start arms the deadline and starts the goroutine; ctx gives the values
// the keep-alive's context carries (never its cancellation).
func (l *keeper) start(ctx context.Context) {
	l.done = make(chan struct{})
	l.ctx, l.cancel = context.WithCancelCause(context.WithoutCancel(ctx))
	l.mu.Lock()
	l.timer = l.clock.AfterFunc(l.deadlineLocked().Sub(l.clock.Now()), l.expire)
	l.mu.Unlock()
	go l.run()
}

// errNow is nil while alive, else why it ended.
func (l *keeper) errNow() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.checkLocked(l.clock.Now())
	return l.err
}

// deadline is the give-up point: budgetFor(ttl).giveUp after the send time
// of the last confirmed extension.
func (l *keeper) deadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadlineLocked()
}

func (l *keeper) deadlineLocked() time.Time { return l.lastSent.Add(budgetFor(l.ttl).giveUp) }

// stopBy is when everything under the lease must have stopped:
// budgetFor(ttl).stopBy after the send of the last confirmed extension.
func (l *keeper) stopBy() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastSent.Add(budgetFor(l.ttl).stopBy)
}

// extendedCh is closed at the next confirmed extension.
func (l *keeper) extendedCh() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.extended == nil {
		l.extended = make(chan struct{})
	}
	return l.extended
}

// expire runs at the deadline.
func (l *keeper) expire() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.checkLocked(l.clock.Now())
}

// checkLocked declares the loss once now has reached the deadline.
func (l *keeper) checkLocked(now time.Time) {
	if l.err != nil || now.Before(l.deadlineLocked()) {
		return
	}
	reason := ErrExpired
	if l.lastErr != nil {
		reason = l.lastErr
	}
	l.endLocked(l.lost(reason))
}

func (l *keeper) endLocked(err error) {
	l.err = err
	l.timer.Stop()
	l.cancel(err)
}

// run is the one goroutine: extend at the budget's cadence after each
// confirmed send, retry transient failures until the deadline.
func (l *keeper) run() {
	defer close(l.done)
	for {
		l.mu.Lock()
		next := l.lastSent.Add(l.interval())
		l.mu.Unlock()
		if !l.sleep(next.Sub(l.clock.Now())) {
			return
		}
		for {
			done, pause := l.extendOnce()
			if done {
				break
			}
			if !l.sleep(pause) {
				return
			}
		}
		if l.ctx.Err() != nil {
			return
		}
	}
}

// sleep waits d on the clock, or until the keep-alive ends; it reports
// whether the whole d passed.
func (l *keeper) sleep(d time.Duration) bool {
	l.mu.Lock()
	l.sleeping = true
	l.mu.Unlock()
	ok := sleep(l.clock, d, l.ctx.Done())
	l.mu.Lock()
	l.sleeping = false
	l.mu.Unlock()
	return ok
}

// interval is the budget's cadence less up to 10%, so that many clients
// started together do not extend in lockstep. The jitter only ever moves
// an extension earlier: one sent late would leave less than the failover
// allowance before the deadline for riding out a leader's death just
// before it was due.
func (l *keeper) interval() time.Duration {
	every := budgetFor(l.ttl).every
	return every - l.c.rnd.n(every/10+1)
}

// retryDelay spaces rounds of failed extensions (a round tries every
// address once): about TTL/30, at most 250ms, so that the retries notice a
// newly elected leader soon after it is elected.
func (l *keeper) retryDelay() time.Duration {
	d := retryDelayMax(l.ttl)
	return d/2 + l.c.rnd.n(d/2+1)
}

// retryDelayMax is the longest retryDelay for ttl.
func retryDelayMax(ttl time.Duration) time.Duration {
	return min(max(ttl/30, 2*time.Millisecond), 250*time.Millisecond)
}

// attemptTimeout bounds one extension sent to one node: about TTL/12
// (100ms to 2s, never more than TTL/6), so that a node that is frozen or
// cut off costs only a part of the failover allowance between the due time
// and the deadline, and the other nodes are tried in time.
func (l *keeper) attemptTimeout() time.Duration {
	return min(max(l.ttl/12, 100*time.Millisecond), 2*time.Second, max(l.ttl/6, time.Millisecond))
}

// pickLocked is the address of the next attempt: l.next places after the
// preferred one, passing over silent addresses while another is left.
func (l *keeper) pickLocked() string {
	n := l.c.size()
	for i := range n {
		if a := l.c.pick(l.next + i); !l.silent[a] {
			l.next += i
			return a
		}
	}
	return l.c.pick(l.next)
}

// extendOnce sends one extension to one node and records its outcome. It
// reports done after a confirmation or once the keep-alive has ended; otherwise
// it says how long to pause before the next attempt. After a failure the
// next attempt goes to the next address, or at once to the leader a node
// named, so that a dead, frozen or deposed leader is left for the node the
// others elected (the token never changes: every attempt is an Extend).
// Each attempt has its own request id and send time, so a confirmation is
// always dated from the send of the request that the server applied.
func (l *keeper) extendOnce() (done bool, pause time.Duration) {
	// Woken past the deadline (the process was paused): the lease is
	// already lost, and an extension sent now could not save it.
	l.mu.Lock()
	sent := l.clock.Now()
	l.checkLocked(sent)
	ended := l.err != nil
	left := l.deadlineLocked().Sub(sent)
	l.mu.Unlock()
	if ended {
		return true, 0
	}
	timeout := max(min(l.attemptTimeout(), left), time.Millisecond)
	actx, cancel := context.WithCancelCause(l.ctx)
	l.mu.Lock()
	addr := l.pickLocked()
	l.attempt = addr
	l.mu.Unlock()
	var silent atomic.Bool
	t := l.clock.AfterFunc(timeout, func() {
		silent.Store(true)
		cancel(fmt.Errorf("%w: %s: no answer to %s within %v", ErrUnreachable, addr, l.what, timeout))
	})
	confirm, err := l.send(actx, addr)
	t.Stop()
	cancel(nil)

	l.mu.Lock()
	defer l.mu.Unlock()
	l.attempt = ""
	if l.err != nil {
		return true, 0 // ended while the request was out
	}
	if err != nil && silent.Load() {
		if l.silent == nil {
			l.silent = map[string]bool{}
		}
		l.silent[addr] = true
	}
	now := l.clock.Now()
	var ae *APIError
	switch {
	case err == nil:
		l.checkLocked(now) // a confirmation after the deadline is too late
		if l.err != nil {
			return true, 0
		}
		l.c.prefer(addr)
		l.next, l.tries, l.silent, l.noLeader = 0, 0, nil, 0
		l.lastSent, l.lastErr = sent, nil
		confirm()
		if l.extended != nil {
			close(l.extended)
			l.extended = nil
		}
		l.timer.Stop()
		l.timer = l.clock.AfterFunc(l.deadlineLocked().Sub(now), l.expire)
		return true, 0
	case errors.As(err, &ae) && ae.Code == api.CodeNotLeader && ae.Leader != "":
		if u, perr := leaderURL(addr, ae.Leader); perr == nil && u != addr {
			l.c.prefer(u)
			l.next = 0
			delete(l.silent, u) // named as the leader: ask it
		} else {
			l.next++
		}
	case errors.Is(err, ErrUnreachable), errors.Is(err, ErrUnavailable), errors.Is(err, ErrInternal):
		if errors.As(err, &ae) && ae.Code == api.CodeNotLeader {
			l.noLeader++
		}
		l.next++
	default:
		l.endLocked(l.lost(err))
		return true, 0
	}
	l.lastErr = err
	l.checkLocked(now)
	if l.err != nil {
		return true, 0
	}
	// Move on at once while this round has addresses left to try; pause
	// after each full round, so that a cluster without a leader is not
	// asked in a tight loop.
	l.tries++
	if l.tries%l.c.size() != 0 {
		return false, 0
	}
	if l.noLeader == l.c.size() {
		l.silent = nil
	}
	l.noLeader = 0
	return false, l.retryDelay()
}
