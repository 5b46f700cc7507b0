package service

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/fencelock/fencelock/clock"
	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/locktable"
	"github.com/fencelock/fencelock/internal/replica"
)

// The leader's side of the node: the cluster clock, proposals, and the
// duties a leader takes on at takeover (the barrier, the orphaned
// waiters, the expiry timer).

// clusterClock is the cluster clock on the leader: the last applied
// cluster time at takeover plus local (monotonic, or injected) time since.
type clusterClock struct {
	clk     clock.Clock
	mu      sync.Mutex
	running bool
	base    locktable.Time
	start   time.Time
}

func (c *clusterClock) resume(base locktable.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.running, c.base, c.start = true, base, c.clk.Now()
}

// rebase restarts a running clock from base, as resume does, and reports
// whether it ran; a halted clock stays halted.
func (c *clusterClock) rebase(base locktable.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.running {
		c.base, c.start = base, c.clk.Now()
	}
	return c.running
}

func (c *clusterClock) halt() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.running = false
}

func (c *clusterClock) now() (locktable.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.running {
		return 0, false
	}
	return c.base + locktable.Time(c.clk.Now().Sub(c.start)), true
}

// when is the instant on the local clock at which cluster time reaches t.
func (c *clusterClock) when(t locktable.Time) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.running {
		return time.Time{}, false
	}
	return c.start.Add(time.Duration(t - c.base)), true
}

// stamp is the cluster time for a command proposed now.
func (s *Service) stamp() (locktable.Time, error) {
	now, ok := s.clock.now()
	if !ok {
		return 0, replica.ErrNotLeader
	}
	return now, nil
}

// apply proposes a stamped command and waits until it is committed and
// applied. The error is about the proposal; the command's own refusal is in
// the Result.
func (s *Service) apply(cmd fsm.Command) (*fsm.Result, error) {
	// Until the log has one, every entry this leader writes switches
	// the request-id memory to the rules by owner (fsm.Command.ByOwner):
	// a log written by an older version replays under its own rules.
	cmd.ByOwner = !s.fsm.RemembersByOwner()
	data, err := fsm.Encode(cmd)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	res, err := s.node.Propose(data, s.cfg.ApplyTimeout)
	if err != nil {
		return nil, err
	}
	s.metrics.Commit(cmd.Op).Observe(time.Since(start).Seconds())
	if res.Duplicate {
		s.metrics.Retries.Inc()
	}
	if errors.Is(res.Err, fsm.ErrClockStep) {
		// Every node refused the stamp as too far ahead of the applied
		// time (fsm.MaxClockStep): this leader's clock jumped (a process
		// frozen for a day, or idle with nothing held for a year).
		// Resume from the applied time, as a new leader would; the time
		// that could not be accounted for is lost, which only makes
		// leases outlast their holders' own reckoning.
		if now := s.fsm.Now(); s.clock.rebase(now) {
			s.log.Warn("cluster time stamp refused as a jump; clock resumed from the applied time",
				"stamp", time.Duration(cmd.Now).String(), "applied", time.Duration(now).String(), "err", res.Err)
		}
	}
	return res, nil
}

// propose stamps cmd with cluster time and applies it. A stamp refused
// as a clock jump is made again once, from the resumed clock.
func (s *Service) propose(cmd fsm.Command) (*fsm.Result, error) {
	for try := 0; ; try++ {
		now, err := s.stamp()
		if err != nil {
			return nil, err
		}
		cmd.Now = now
		res, err := s.apply(cmd)
		if err != nil || try > 0 || !errors.Is(res.Err, fsm.ErrClockStep) {
			return res, err
		}
	}
}

// watchLeadership starts the leader's duties on gaining leadership and
// stops them on losing it.
func (s *Service) watchLeadership() {
	defer s.wg.Done()
	var stopLeading func()
	defer func() {
		if stopLeading != nil {
			stopLeading()
		}
	}()
	for {
		select {
		case <-s.stop:
			return
		case leader := <-s.node.Leadership():
			if stopLeading != nil {
				stopLeading()
				stopLeading = nil
			}
			if leader {
				s.log.Info("became leader")
				stopLeading = s.lead()
			} else {
				s.log.Info("lost leadership")
			}
		}
	}
}

// lead runs the leader's duties until the returned stop is called.
func (s *Service) lead() (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if !s.takeOver(ctx) {
			return
		}
		if s.cluster.Clustered() {
			s.waiters.watchUnserved(true)
			graced := make(chan struct{})
			go func() {
				defer close(graced)
				if sleepClock(ctx, s.clock.clk, orphanGrace) {
					s.cancelOrphans(ctx)
				}
				s.waiters.watchUnserved(false)
			}()
			defer func() { <-graced }()
		}
		s.tickLoop(ctx)
	}()
	notLeading := func() {
		s.ready.Store(false)
		s.counting.Store(false)
		s.metrics.Leader.Set(0)
	}
	return func() {
		notLeading()
		cancel()
		<-done
		// takeOver may have declared itself ready between the first
		// notLeading and cancel: say it again once it has returned.
		notLeading()
		s.clock.halt()
		s.waiters.failAll()
	}
}

// takeOver makes a new leader ready: every committed entry applied, the
// clock resumed from the last applied cluster time, and queued waiters that
// no request on this node serves cancelled.
func (s *Service) takeOver(ctx context.Context) bool {
	for {
		err := s.node.Barrier(s.cfg.ApplyTimeout)
		if err == nil {
			break
		}
		s.log.Warn("barrier failed", "err", err)
		if !sleepCtx(ctx, 100*time.Millisecond) {
			return false
		}
	}
	s.clock.resume(s.fsm.Now())
	if !s.raisePendingFloor(ctx) {
		return false
	}
	for {
		err := s.cluster.RecordSelf()
		if err == nil {
			break
		}
		s.log.Warn("recording this node's client address failed", "err", err)
		if !sleepCtx(ctx, 100*time.Millisecond) {
			return false
		}
	}
	// Alone, nobody can re-send a wait to another node: waiters restored
	// from the log are orphans now. In a cluster their clients re-send
	// their waits here (same request id, same queue place), so they keep
	// their places for orphanGrace first; see lead.
	if !s.cluster.Clustered() && !s.cancelOrphans(ctx) {
		return false
	}
	if ctx.Err() != nil {
		return false
	}
	now, _ := s.clock.now()
	s.counting.Store(true)
	s.ready.Store(true)
	s.becameReady.fire()
	s.metrics.Leader.Set(1)
	s.log.Info("ready", "cluster_time", time.Duration(now).String(),
		"last_token", s.fsm.LastToken(), "applied_index", s.fsm.AppliedIndex())
	return true
}

// orphanGrace is how long a new leader of a cluster keeps queued waiters
// that no request on this node serves: long enough for a client whose
// leader died or froze to notice (client.WithWaitCheck, about two seconds)
// and re-send its wait here.
const orphanGrace = 5 * time.Second

// cancelOrphans cancels every queued waiter that no request on this node
// serves, and releases what the queue handed to such waiters meanwhile
// unless a re-sent wait was answered with it. It reports false if ctx
// ended first.
func (s *Service) cancelOrphans(ctx context.Context) bool {
	for {
		var orphans []fsm.Item
		for _, q := range s.fsm.QueuedWaiters() {
			if !s.waiters.has(q.Key, q.Holder) {
				orphans = append(orphans, fsm.Item{Key: q.Key, Holder: q.Holder})
			}
		}
		if len(orphans) == 0 {
			break
		}
		if len(orphans) > fsm.MaxBatch {
			orphans = orphans[:fsm.MaxBatch]
		}
		res, err := s.propose(fsm.Command{Op: fsm.OpCancelWaits, Items: orphans})
		if err != nil {
			s.log.Warn("cancelling orphaned waiters failed", "err", err)
			if !sleepCtx(ctx, 100*time.Millisecond) {
				return false
			}
			continue
		}
		s.log.Info("cancelled waiters left from before the takeover", "count", res.Cancelled)
	}
	for _, ev := range s.waiters.takeUnserved() {
		id, ok := s.fsm.UnclaimedWaitGrant(ev.Key, ev.Holder, ev.Token)
		if !ok || s.waiters.has(ev.Key, ev.Holder) {
			continue
		}
		rel, err := s.propose(fsm.Command{Op: fsm.OpRelease, RequestID: id, Key: ev.Key, Holder: ev.Holder, Token: ev.Token})
		s.log.Info("released a grant whose waiter did not come back", "key", ev.Key, "holder", ev.Holder,
			"token", ev.Token, "released", err == nil && rel.Released)
	}
	return ctx.Err() == nil
}

// tickLoop is the leader-only expiry timer: it sleeps until the table's
// next deadline, or until cluster time has gone unrecorded for
// ClockCheckpoint while something is held or queued, and proposes a Tick
// stamped with cluster time.
func (s *Service) tickLoop(ctx context.Context) {
	// The timer is the Clock's, armed for the deadline's instant on that
	// clock, so an injected clock fires it when its time is advanced.
	fire := make(chan struct{}, 1)
	var (
		lastTick time.Time
		ticked   bool
	)
	for {
		at, ok := s.fsm.NextDeadline()
		var due time.Time // when to tick, on s.clock.clk
		if ok {
			if cp := s.fsm.Now() + locktable.Time(s.cfg.ClockCheckpoint); cp < at {
				at = cp
			}
			var running bool
			if due, running = s.clock.when(at); !running {
				return
			}
			if gap := lastTick.Add(s.cfg.MinTickInterval); ticked && due.Before(gap) {
				due = gap
			}
			if !due.After(s.clock.clk.Now()) {
				lastTick, ticked = s.clock.clk.Now(), true
				if _, err := s.propose(fsm.Command{Op: fsm.OpTick}); err != nil {
					s.log.Warn("tick failed", "err", err)
					if !sleepCtx(ctx, 100*time.Millisecond) {
						return
					}
				}
				continue
			}
		}
		var timer clock.Timer
		if ok {
			timer = afterAt(s.clock.clk, due, func() { notify(fire) })
		}
		select {
		case <-ctx.Done():
		case <-s.fsm.Changed():
		case <-fire:
		}
		if timer != nil {
			timer.Stop()
		}
		if ctx.Err() != nil {
			return
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// sleepClock is sleepCtx on clk's time.
func sleepClock(ctx context.Context, clk clock.Clock, d time.Duration) bool {
	done := make(chan struct{}, 1)
	t := clk.AfterFunc(d, func() { notify(done) })
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-done:
		return true
	}
}

// raisePendingFloor commits the token floor that `fencelock recover` or
// the server's --token-floor left in the state file, before the new
// leader serves any grant, and clears it once applied. It returns false
// when ctx ended first.
func (s *Service) raisePendingFloor(ctx context.Context) bool {
	for {
		floor := s.node.PendingFloor()
		if floor == 0 {
			return true
		}
		before := s.fsm.LastToken()
		_, err := s.propose(fsm.Command{Op: fsm.OpTokenFloor, Token: floor})
		if err == nil {
			err = s.node.ClearPendingFloor(floor)
		}
		if err == nil {
			if before < floor {
				s.log.Warn("raised the token counter to the token floor (fencelock recover, or --token-floor)",
					"floor", floor, "last_token_before", before, "last_token", s.fsm.LastToken())
			} else {
				s.log.Info("the token counter is already above the token floor: nothing raised",
					"floor", floor, "last_token", before)
			}
			return true
		}
		s.log.Warn("raising the token floor failed", "floor", floor, "err", err)
		if !sleepCtx(ctx, 100*time.Millisecond) {
			return false
		}
	}
}
