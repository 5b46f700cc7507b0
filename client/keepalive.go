package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/plant"
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
	// asked are the addresses asked in this round of attempts (a round
	// asks every address at most once, the preferred first), and tries
	// counts the round's failed attempts.
	asked map[string]bool
	tries int
	// silent are the addresses whose attempt got no answer at all since
	// the last confirmation (a frozen or cut-off node). Later rounds skip
	// them while another address is left, so a frozen leader costs one
	// attempt's timeout, not one per round (and, with the next address
	// asked beside it after the hedge delay, only that much of the
	// failover allowance). A node named as the leader is still asked.
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
	// only while it waits on it: waiting (asleep, or on its attempts with
	// no answer yet to take in), with attempts out at the addresses in out
	// and pending answers not yet taken in.
	// round numbers the calls of extend, so that an attempt it left
	// behind does not count as out in the next.
	waiting bool
	out     map[string]bool
	pending int
	round   int
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

func (l *keeper) deadlineLocked() time.Time {
	if plant.On("keepalive-gives-up-late") {
		return l.lastSent.Add(budgetFor(l.ttl).giveUp + l.ttl/8)
	}
	return l.lastSent.Add(budgetFor(l.ttl).giveUp)
}

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
		if !l.extend() {
			return
		}
	}
}

// sleep waits d on the clock, or until the keep-alive ends; it reports
// whether the whole d passed.
func (l *keeper) sleep(d time.Duration) bool {
	if d <= 0 {
		return true
	}
	ch := make(chan struct{})
	t := l.clock.AfterFunc(d, func() { l.wake(func() { close(ch) }) })
	l.mu.Lock()
	l.waiting = true // only now that the timer is armed
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.waiting = false
		l.mu.Unlock()
	}()
	select {
	case <-ch:
		return true
	case <-l.ctx.Done():
		t.Stop()
		return false
	}
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

// hedgeDelay is how long an attempt may go unanswered before the next
// address is asked beside it: a third of the attempt's timeout, so that a
// frozen or cut-off node, or one whose calls wait on such a node, costs
// about that much of the failover allowance however often it is asked,
// while a node answering in the usual milliseconds is asked alone.
func (l *keeper) hedgeDelay() time.Duration { return max(l.attemptTimeout()/3, time.Millisecond) }

// pickLocked is the address of the next attempt: from the preferred one
// on, the first not asked in this round and without an attempt out,
// passing over silent addresses while one is not silent; "" when the round
// has none left.
func (l *keeper) pickLocked() string {
	n := l.c.size()
	allSilent := len(l.silent) >= n
	for i := range n {
		a := l.c.pick(i)
		if !l.out[a] && !l.asked[a] && (allSilent || !l.silent[a]) {
			return a
		}
	}
	return ""
}

// wake runs a timer's signal to the goroutine and marks it as no longer
// waiting on the clock alone, in one step under mu: the goroutine decides
// under mu whether it waits, so it never takes in a signal and waits
// again before the mark.
func (l *keeper) wake(signal func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	signal()
	l.waiting = false
}

// signal sends on a channel with room for one, once.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// attemptResult is the outcome of one extension sent to one node.
type attemptResult struct {
	addr    string
	sent    time.Time
	confirm func()
	err     error
	silent  bool // no answer came within the attempt's timeout
}

// extend sends extensions until one is confirmed or the keep-alive ends;
// it reports whether the keep-alive goes on. An attempt goes to one node;
// after a failure the next goes to the next address, or at once to the
// leader a node named, so that a dead, frozen or deposed leader is left
// for the node the others elected (the token never changes: every
// attempt is an Extend). An attempt that has had no answer for
// hedgeDelay is left running and the next address is asked beside it, so
// that a node that cannot answer costs little once another can. Each
// attempt has its own request id and send time, so a confirmation is
// always dated from the send of the request the server applied; the
// first one confirmed ends the others.
func (l *keeper) extend() bool {
	results := make(chan attemptResult, l.c.size()+1)
	// over is closed when extend returns, so that an attempt answered
	// after it (cancelled, or left out) never blocks on results, whose
	// room was sized before a newly named leader could add an address.
	over := make(chan struct{})
	defer close(over)
	actx, cancelAll := context.WithCancel(l.ctx)
	defer cancelAll()
	hedge := make(chan struct{}, 1)
	var hedgeTimer, pauseTimer Timer
	defer func() {
		if hedgeTimer != nil {
			hedgeTimer.Stop()
		}
		if pauseTimer != nil {
			pauseTimer.Stop()
		}
	}()
	paused := false
	resume := make(chan struct{}, 1)
	l.mu.Lock()
	l.round++
	round := l.round
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.round++
		l.out, l.pending = nil, 0
		l.mu.Unlock()
	}()

	// launch sends the next attempt of the round and arms the hedge; it
	// reports false when the round has no address left to ask.
	launch := func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		sent := l.clock.Now()
		l.checkLocked(sent)
		if l.err != nil {
			return true // the keep-alive has ended; l.ctx says so
		}
		addr := l.pickLocked()
		if addr == "" {
			return false
		}
		if l.out == nil {
			l.out = map[string]bool{}
		}
		if l.asked == nil {
			l.asked = map[string]bool{}
		}
		l.out[addr], l.asked[addr] = true, true
		timeout := max(min(l.attemptTimeout(), l.deadlineLocked().Sub(sent)), time.Millisecond)
		// The attempt's timer is armed here, before the goroutine waits
		// again, so that a test moving a fake clock while it waits never
		// moves it past an attempt whose timer is not armed yet.
		a := &attempt{addr: addr, sent: sent}
		var cctx context.Context
		cctx, a.cancel = context.WithCancelCause(actx)
		a.timer = l.clock.AfterFunc(timeout, func() {
			a.silent.Store(true)
			l.answered(round, a)
			a.cancel(fmt.Errorf("%w: %s: no answer to %s within %v", ErrUnreachable, addr, l.what, timeout))
		})
		go l.attemptAt(cctx, round, a, results, over)
		if hedgeTimer != nil {
			hedgeTimer.Stop()
		}
		hedgeTimer = l.clock.AfterFunc(l.hedgeDelay(), func() { l.wake(func() { signal(hedge) }) })
		return true
	}

	launch()
	for {
		l.mu.Lock()
		// A signal already sent is work to do, not a wait on the clock.
		l.waiting = len(hedge) == 0 && len(resume) == 0
		l.mu.Unlock()
		var r attemptResult
		got := false
		select {
		case r = <-results:
			got = true
		case <-hedge:
		case <-resume:
			paused = false
			l.mu.Lock()
			l.asked = nil // a new round
			l.mu.Unlock()
		case <-l.ctx.Done():
		}
		l.mu.Lock()
		l.waiting = false
		if got {
			l.pending--
		}
		l.mu.Unlock()
		if l.ctx.Err() != nil {
			return false
		}
		if !got {
			if !paused {
				launch() // a hedge, or the next round
			}
			continue
		}
		if !l.settle(r) {
			return l.ctx.Err() == nil
		}
		// Move on at once while this round has addresses left to ask;
		// pause once it has none, or has had as many failures as there
		// are addresses (nodes naming each other as the leader), so that a
		// cluster without a leader is not asked in a tight loop.
		if paused || !l.roundFailed() && launch() {
			continue
		}
		paused = true
		if hedgeTimer != nil {
			hedgeTimer.Stop()
		}
		pause := l.endRound()
		pauseTimer = l.clock.AfterFunc(pause, func() { l.wake(func() { signal(resume) }) })
	}
}

// roundFailed reports whether this round has had a failure per address.
func (l *keeper) roundFailed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.tries >= l.c.size()
}

// endRound ends a round of failed attempts and says how long to pause
// before the next. A round whose failures were all not_leader naming
// nobody means the nodes still answering know no leader, so the leader,
// elected meanwhile, is one of the silent: their marks are dropped and the
// next round asks them again.
func (l *keeper) endRound() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.tries > 0 && l.noLeader == l.tries {
		l.silent = nil
	}
	l.tries, l.noLeader = 0, 0
	return l.retryDelay()
}

// attempt is one extension out at one node.
type attempt struct {
	addr   string
	sent   time.Time
	cancel context.CancelCauseFunc
	timer  Timer       // ends the attempt at its timeout
	silent atomic.Bool // the timeout ended it
	// counted is set, under the keeper's mu, once the attempt no longer
	// counts as out: its answer came, or its timeout ended it.
	counted bool
}

// answered takes attempt a out of the attempts waiting on an answer and
// counts its result as pending, once.
func (l *keeper) answered(round int, a *attempt) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if a.counted || l.round != round {
		return
	}
	a.counted = true
	delete(l.out, a.addr)
	l.pending++
}

// attemptAt sends attempt a and reports its outcome.
func (l *keeper) attemptAt(ctx context.Context, round int, a *attempt, results chan<- attemptResult, over <-chan struct{}) {
	confirm, err := l.send(ctx, a.addr)
	a.timer.Stop()
	a.cancel(nil)
	l.answered(round, a)
	select {
	case results <- attemptResult{addr: a.addr, sent: a.sent, confirm: confirm, err: err, silent: err != nil && a.silent.Load()}:
	case <-over:
	}
}

// settle records one attempt's outcome; it reports whether to go on.
func (l *keeper) settle(r attemptResult) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return false // ended while the request was out
	}
	if r.silent {
		if l.silent == nil {
			l.silent = map[string]bool{}
		}
		l.silent[r.addr] = true
	}
	now := l.clock.Now()
	err := r.err
	var ae *APIError
	switch {
	case err == nil:
		l.checkLocked(now) // a confirmation after the deadline is too late
		if l.err != nil {
			return false
		}
		l.c.prefer(r.addr)
		l.asked, l.tries, l.silent, l.noLeader = nil, 0, nil, 0
		// A later send confirmed first keeps the later date: the lease
		// runs from the newest extension the server is known to hold.
		if r.sent.After(l.lastSent) {
			l.lastSent = r.sent
		}
		l.lastErr = nil
		r.confirm()
		if l.extended != nil {
			close(l.extended)
			l.extended = nil
		}
		l.timer.Stop()
		l.timer = l.clock.AfterFunc(l.deadlineLocked().Sub(now), l.expire)
		return false
	case errors.As(err, &ae) && ae.Code == api.CodeNotLeader && ae.Leader != "":
		if u, perr := leaderURL(r.addr, ae.Leader); perr == nil && u != r.addr {
			l.c.prefer(u)
			delete(l.silent, u) // named as the leader: ask it, in this round too
			delete(l.asked, u)
		}
	case errors.Is(err, ErrUnreachable), errors.Is(err, ErrUnavailable), errors.Is(err, ErrInternal):
		// A node that knows no leader, or that is down (nothing listens),
		// tells nothing about the silent ones: a round of only such
		// answers asks them again (endRound).
		if errors.As(err, &ae) && ae.Code == api.CodeNotLeader || errors.Is(err, errDown) {
			l.noLeader++
		}
	default:
		l.endLocked(l.lost(err))
		return false
	}
	l.lastErr = err
	l.tries++
	l.checkLocked(now)
	return l.err == nil
}
