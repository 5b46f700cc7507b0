package keepalive

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencelock/fencelock/clock"
	"github.com/fencelock/fencelock/internal/plant"
)

// Addrs is the address book the keep-alive asks along.
type Addrs interface {
	Len() int
	Pick(n int) string  // the preferred address, or the one n places after it
	Prefer(addr string) // make addr the first one asked
}

// Verdict is what a failed extension tells the keep-alive (Config.Judge).
type Verdict struct {
	Lost     bool   // no retry can help: the lease is lost, with this failure as the reason
	Leader   string // the base URL of the leader a node named: it is asked next, in this round too
	NoLeader bool   // the node knows no leader (not_leader naming nobody), or is down (refused)
}

// Config is one keep-alive: what it keeps alive, and in whose words.
type Config struct {
	Clock clock.Clock // monotonic; deadlines and cadence are measured on it
	TTL   time.Duration
	Sent  time.Time // the send time of the grant or open the lease runs from
	What  string    // names the extension in a timeout error
	Addrs Addrs
	// Jitter is a uniform duration in [0, d).
	Jitter func(d time.Duration) time.Duration
	// Send sends one extension to addr. On success it returns confirm,
	// which the keeper calls, holding its lock, once it has accepted the
	// answer.
	Send func(ctx context.Context, addr string) (confirm func(), err error)
	// Judge says what a failed extension to addr means.
	Judge func(addr string, err error) Verdict
	// Lost is the error that ends the keep-alive for reason.
	Lost func(reason error) error
	// Expired is the reason of a loss when no extension failed since the
	// last confirmation; Unreachable is what the error of an attempt left
	// unanswered at its timeout wraps.
	Expired, Unreachable error
}

// Keeper is one running keep-alive.
type Keeper struct {
	cfg Config

	ctx    context.Context
	cancel context.CancelCauseFunc
	done   chan struct{} // closed when the goroutine has returned

	mu       sync.Mutex
	lastSent time.Time   // send time of the last confirmed grant, open or extension
	timer    clock.Timer // calls expire at the deadline
	lastErr  error       // the last transient failure since the last confirmation
	err      error       // set once ended: Stop's reason, or Lost(...)
	stopped  bool        // Stop was called
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
	// Extended).
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

// Start arms the deadline and starts the goroutine; ctx gives the values
// the keep-alive's context carries (never its cancellation).
func Start(ctx context.Context, cfg Config) *Keeper {
	k := &Keeper{cfg: cfg, lastSent: cfg.Sent}
	k.done = make(chan struct{})
	k.ctx, k.cancel = context.WithCancelCause(context.WithoutCancel(ctx))
	k.mu.Lock()
	k.timer = k.cfg.Clock.AfterFunc(k.deadlineLocked().Sub(k.cfg.Clock.Now()), k.expire)
	k.mu.Unlock()
	go k.run()
	return k
}

// Context is cancelled when the keep-alive ends, with Err as its cause.
func (k *Keeper) Context() context.Context { return k.ctx }

// Done is closed when the keep-alive ends.
func (k *Keeper) Done() <-chan struct{} { return k.ctx.Done() }

// Err is nil while alive, else why it ended.
func (k *Keeper) Err() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.checkLocked(k.cfg.Clock.Now())
	return k.err
}

// Check declares the loss now if the give-up point has passed.
func (k *Keeper) Check() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.checkLocked(k.cfg.Clock.Now())
}

// Deadline is the give-up point: BudgetFor(TTL).GiveUp after the send time
// of the last confirmed extension.
func (k *Keeper) Deadline() time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.deadlineLocked()
}

func (k *Keeper) deadlineLocked() time.Time {
	if plant.On("keepalive-gives-up-late") {
		return k.lastSent.Add(BudgetFor(k.cfg.TTL).GiveUp + k.cfg.TTL/8)
	}
	return k.lastSent.Add(BudgetFor(k.cfg.TTL).GiveUp)
}

// StopBy is when everything under the lease must have stopped:
// BudgetFor(TTL).StopBy after the send of the last confirmed extension.
func (k *Keeper) StopBy() time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.lastSent.Add(BudgetFor(k.cfg.TTL).StopBy)
}

// HeldUntil is TTL after the send of the last confirmed extension: the
// earliest the server can consider the lease expired.
func (k *Keeper) HeldUntil() time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.lastSent.Add(k.cfg.TTL)
}

// LastErr is the last transient failure since the last confirmation.
func (k *Keeper) LastErr() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.lastErr
}

// Stop ends the keep-alive with reason, unless it has been lost, and
// waits for its goroutine. It returns the loss, if it had been lost, and
// whether this was the first call; a later call only waits.
func (k *Keeper) Stop(reason error) (lost error, first bool) {
	k.mu.Lock()
	if k.stopped {
		k.mu.Unlock()
		<-k.done
		return nil, false
	}
	k.stopped = true
	k.checkLocked(k.cfg.Clock.Now())
	lost = k.err
	if lost == nil {
		k.endLocked(reason)
	}
	k.mu.Unlock()
	<-k.done
	return lost, true
}

// Extended is closed at the next confirmed extension.
func (k *Keeper) Extended() <-chan struct{} {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.extended == nil {
		k.extended = make(chan struct{})
	}
	return k.extended
}

// expire runs at the deadline.
func (k *Keeper) expire() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.checkLocked(k.cfg.Clock.Now())
}

// checkLocked declares the loss once now has reached the deadline.
func (k *Keeper) checkLocked(now time.Time) {
	if k.err != nil || now.Before(k.deadlineLocked()) {
		return
	}
	reason := k.cfg.Expired
	if k.lastErr != nil {
		reason = k.lastErr
	}
	k.endLocked(k.cfg.Lost(reason))
}

func (k *Keeper) endLocked(err error) {
	k.err = err
	k.timer.Stop()
	k.cancel(err)
}

// run is the one goroutine: extend at the budget's cadence after each
// confirmed send, retry transient failures until the deadline.
func (k *Keeper) run() {
	defer close(k.done)
	for {
		k.mu.Lock()
		next := k.lastSent.Add(k.interval())
		k.mu.Unlock()
		if !k.sleep(next) {
			return
		}
		if !k.extend() {
			return
		}
	}
}

// sleep waits until the clock reads until, or the keep-alive ends; it
// reports whether until came. A clock that can schedule a call for an
// instant (clock.AtClock) is asked for until itself: a delay read from
// the clock before the timer is armed fires late if the clock moved in
// between, which a test advancing a fake clock does (the session's
// keep-alive then slept through the advance that was to wake it).
func (k *Keeper) sleep(until time.Time) bool {
	if !until.After(k.cfg.Clock.Now()) {
		return true
	}
	ch := make(chan struct{})
	fire := func() { k.wake(func() { close(ch) }) }
	var t clock.Timer
	if at, ok := k.cfg.Clock.(clock.AtClock); ok {
		t = at.AtFunc(until, fire)
	} else {
		t = k.cfg.Clock.AfterFunc(until.Sub(k.cfg.Clock.Now()), fire)
	}
	k.mu.Lock()
	k.waiting = true // only now that the timer is armed
	k.mu.Unlock()
	defer func() {
		k.mu.Lock()
		k.waiting = false
		k.mu.Unlock()
	}()
	select {
	case <-ch:
		return true
	case <-k.ctx.Done():
		t.Stop()
		return false
	}
}

// interval is the budget's cadence less up to 10%, so that many clients
// started together do not extend in lockstep. The jitter only ever moves
// an extension earlier: one sent late would leave less than the failover
// allowance before the deadline for riding out a leader's death just
// before it was due.
func (k *Keeper) interval() time.Duration {
	every := BudgetFor(k.cfg.TTL).Every
	return every - k.cfg.Jitter(every/10+1)
}

// retryDelay spaces rounds of failed extensions (a round tries every
// address once): about TTL/30, at most 250ms, so that the retries notice a
// newly elected leader soon after it is elected.
func (k *Keeper) retryDelay() time.Duration {
	d := RetryDelayMax(k.cfg.TTL)
	return d/2 + k.cfg.Jitter(d/2+1)
}

// RetryDelayMax is the longest retryDelay for ttl.
func RetryDelayMax(ttl time.Duration) time.Duration {
	return min(max(ttl/30, 2*time.Millisecond), 250*time.Millisecond)
}

// AttemptTimeout bounds one extension sent to one node: about TTL/12
// (100ms to 2s, never more than TTL/6), so that a node that is frozen or
// cut off costs only a part of the failover allowance between the due time
// and the deadline, and the other nodes are tried in time.
func (k *Keeper) AttemptTimeout() time.Duration {
	return min(max(k.cfg.TTL/12, 100*time.Millisecond), 2*time.Second, max(k.cfg.TTL/6, time.Millisecond))
}

// HedgeDelay is how long an attempt may go unanswered before the next
// address is asked beside it: a third of the attempt's timeout, so that a
// frozen or cut-off node, or one whose calls wait on such a node, costs
// about that much of the failover allowance however often it is asked,
// while a node answering in the usual milliseconds is asked alone.
func (k *Keeper) HedgeDelay() time.Duration { return max(k.AttemptTimeout()/3, time.Millisecond) }

// pickLocked is the address of the next attempt: from the preferred one
// on, the first not asked in this round and without an attempt out,
// passing over silent addresses while one is not silent; "" when the round
// has none left.
func (k *Keeper) pickLocked() string {
	n := k.cfg.Addrs.Len()
	allSilent := len(k.silent) >= n
	for i := range n {
		a := k.cfg.Addrs.Pick(i)
		if !k.out[a] && !k.asked[a] && (allSilent || !k.silent[a]) {
			return a
		}
	}
	return ""
}

// wake runs a timer's signal to the goroutine and marks it as no longer
// waiting on the clock alone, in one step under mu: the goroutine decides
// under mu whether it waits, so it never takes in a signal and waits
// again before the mark.
func (k *Keeper) wake(signal func()) {
	k.mu.Lock()
	defer k.mu.Unlock()
	signal()
	k.waiting = false
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
// HedgeDelay is left running and the next address is asked beside it, so
// that a node that cannot answer costs little once another can. Each
// attempt has its own request id and send time, so a confirmation is
// always dated from the send of the request the server applied; the
// first one confirmed ends the others.
func (k *Keeper) extend() bool {
	results := make(chan attemptResult, k.cfg.Addrs.Len()+1)
	// over is closed when extend returns, so that an attempt answered
	// after it (cancelled, or left out) never blocks on results, whose
	// room was sized before a newly named leader could add an address.
	over := make(chan struct{})
	defer close(over)
	actx, cancelAll := context.WithCancel(k.ctx)
	defer cancelAll()
	hedge := make(chan struct{}, 1)
	var hedgeTimer, pauseTimer clock.Timer
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
	k.mu.Lock()
	k.round++
	round := k.round
	k.mu.Unlock()
	defer func() {
		k.mu.Lock()
		k.round++
		k.out, k.pending = nil, 0
		k.mu.Unlock()
	}()

	// launch sends the next attempt of the round and arms the hedge; it
	// reports false when the round has no address left to ask.
	launch := func() bool {
		k.mu.Lock()
		defer k.mu.Unlock()
		sent := k.cfg.Clock.Now()
		k.checkLocked(sent)
		if k.err != nil {
			return true // the keep-alive has ended; k.ctx says so
		}
		addr := k.pickLocked()
		if addr == "" {
			return false
		}
		if k.out == nil {
			k.out = map[string]bool{}
		}
		if k.asked == nil {
			k.asked = map[string]bool{}
		}
		k.out[addr], k.asked[addr] = true, true
		timeout := max(min(k.AttemptTimeout(), k.deadlineLocked().Sub(sent)), time.Millisecond)
		// The attempt's timer is armed here, before the goroutine waits
		// again, so that a test moving a fake clock while it waits never
		// moves it past an attempt whose timer is not armed yet.
		a := &attempt{addr: addr, sent: sent}
		var cctx context.Context
		cctx, a.cancel = context.WithCancelCause(actx)
		a.timer = k.cfg.Clock.AfterFunc(timeout, func() {
			a.silent.Store(true)
			k.answered(round, a)
			a.cancel(fmt.Errorf("%w: %s: no answer to %s within %v", k.cfg.Unreachable, addr, k.cfg.What, timeout))
		})
		go k.attemptAt(cctx, round, a, results, over)
		if hedgeTimer != nil {
			hedgeTimer.Stop()
		}
		hedgeTimer = k.cfg.Clock.AfterFunc(k.HedgeDelay(), func() { k.wake(func() { signal(hedge) }) })
		return true
	}

	launch()
	for {
		k.mu.Lock()
		// A signal already sent is work to do, not a wait on the clock.
		k.waiting = len(hedge) == 0 && len(resume) == 0
		k.mu.Unlock()
		var r attemptResult
		got := false
		select {
		case r = <-results:
			got = true
		case <-hedge:
		case <-resume:
			paused = false
			k.mu.Lock()
			k.asked = nil // a new round
			k.mu.Unlock()
		case <-k.ctx.Done():
		}
		k.mu.Lock()
		k.waiting = false
		if got {
			k.pending--
		}
		k.mu.Unlock()
		if k.ctx.Err() != nil {
			return false
		}
		if !got {
			if !paused {
				launch() // a hedge, or the next round
			}
			continue
		}
		if !k.settle(r) {
			return k.ctx.Err() == nil
		}
		// Move on at once while this round has addresses left to ask;
		// pause once it has none, or has had as many failures as there
		// are addresses (nodes naming each other as the leader), so that a
		// cluster without a leader is not asked in a tight loop.
		if paused || !k.roundFailed() && launch() {
			continue
		}
		paused = true
		if hedgeTimer != nil {
			hedgeTimer.Stop()
		}
		pause := k.endRound()
		pauseTimer = k.cfg.Clock.AfterFunc(pause, func() { k.wake(func() { signal(resume) }) })
	}
}

// roundFailed reports whether this round has had a failure per address.
func (k *Keeper) roundFailed() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.tries >= k.cfg.Addrs.Len()
}

// endRound ends a round of failed attempts and says how long to pause
// before the next. A round whose failures were all not_leader naming
// nobody means the nodes still answering know no leader, so the leader,
// elected meanwhile, is one of the silent: their marks are dropped and the
// next round asks them again.
func (k *Keeper) endRound() time.Duration {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.tries > 0 && k.noLeader == k.tries {
		k.silent = nil
	}
	k.tries, k.noLeader = 0, 0
	return k.retryDelay()
}

// attempt is one extension out at one node.
type attempt struct {
	addr   string
	sent   time.Time
	cancel context.CancelCauseFunc
	timer  clock.Timer // ends the attempt at its timeout
	silent atomic.Bool // the timeout ended it
	// counted is set, under the keeper's mu, once the attempt no longer
	// counts as out: its answer came, or its timeout ended it.
	counted bool
}

// answered takes attempt a out of the attempts waiting on an answer and
// counts its result as pending, once.
func (k *Keeper) answered(round int, a *attempt) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if a.counted || k.round != round {
		return
	}
	a.counted = true
	delete(k.out, a.addr)
	k.pending++
}

// attemptAt sends attempt a and reports its outcome.
func (k *Keeper) attemptAt(ctx context.Context, round int, a *attempt, results chan<- attemptResult, over <-chan struct{}) {
	confirm, err := k.cfg.Send(ctx, a.addr)
	a.timer.Stop()
	a.cancel(nil)
	k.answered(round, a)
	select {
	case results <- attemptResult{addr: a.addr, sent: a.sent, confirm: confirm, err: err, silent: err != nil && a.silent.Load()}:
	case <-over:
	}
}

// settle records one attempt's outcome; it reports whether to go on.
func (k *Keeper) settle(r attemptResult) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.err != nil {
		return false // ended while the request was out
	}
	if r.silent {
		if k.silent == nil {
			k.silent = map[string]bool{}
		}
		k.silent[r.addr] = true
	}
	now := k.cfg.Clock.Now()
	if r.err == nil {
		k.checkLocked(now) // a confirmation after the deadline is too late
		if k.err != nil {
			return false
		}
		k.cfg.Addrs.Prefer(r.addr)
		k.asked, k.tries, k.silent, k.noLeader = nil, 0, nil, 0
		// A later send confirmed first keeps the later date: the lease
		// runs from the newest extension the server is known to hold.
		if r.sent.After(k.lastSent) {
			k.lastSent = r.sent
		}
		k.lastErr = nil
		r.confirm()
		if k.extended != nil {
			close(k.extended)
			k.extended = nil
		}
		k.timer.Stop()
		k.timer = k.cfg.Clock.AfterFunc(k.deadlineLocked().Sub(now), k.expire)
		return false
	}
	switch v := k.cfg.Judge(r.addr, r.err); {
	case v.Lost:
		k.endLocked(k.cfg.Lost(r.err))
		return false
	case v.Leader != "":
		k.cfg.Addrs.Prefer(v.Leader)
		delete(k.silent, v.Leader) // named as the leader: ask it, in this round too
		delete(k.asked, v.Leader)
	case v.NoLeader:
		k.noLeader++
	}
	k.lastErr = r.err
	k.tries++
	k.checkLocked(now)
	return k.err == nil
}

// Waiting reports whether the goroutine waits on its clock alone: asleep
// (a pause, or the next due time), or with attempts out only at addresses
// in hanging, which will not answer before their timeout. A test that
// moves a fake clock only then never ages an attempt that a server is
// answering.
func (k *Keeper) Waiting(hanging ...string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.waiting || k.pending > 0 {
		return false
	}
	for a := range k.out {
		if !slices.Contains(hanging, a) {
			return false
		}
	}
	return true
}
