package service

import (
	"context"
	"errors"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/locktable"
)

// acquireWait queues in the key's FIFO and answers when the grant or the
// end of the wait is committed. A ctx that ends is a caller that went
// away. See the package comment for how a waiter that gives up is
// handled. The quota reservation is released once the wait is in the
// table (or refused): from then on the table counts it.
func (s *Service) acquireWait(ctx context.Context, g grant, release func()) (api.Lease, *Error) {
	var none api.Lease
	sub := s.waiters.join(g.key, g.holder)
	now, err := s.stamp()
	if err != nil {
		s.waiters.remove(sub)
		return none, proposalError(err)
	}
	res, err := s.apply(s.waitCommand(g, now))
	release()
	if err != nil {
		s.waiters.remove(sub)
		return none, proposalError(err)
	}
	if res.Err != nil || res.Granted {
		s.waiters.remove(sub)
		if res.Err != nil {
			if !s.countQueueFull(res.Err) {
				s.metrics.Refusals.WithLabelValues("acquire").Inc()
			}
			return none, s.commandError(res.Err, res.Now)
		}
		return wireLease(res.Lease, s.answerNow(res.Now)), nil
	}
	after := res.Index // events at or before our Wait entry are not ours

	// The table drops the waiter at its deadline through a leader Tick;
	// this backstop only matters if ticks stop (no leader).
	backstopC := make(chan struct{}, 1)
	backstop := s.clock.clk.AfterFunc(time.Duration(g.wait)+5*time.Second, func() { notify(backstopC) })
	defer backstop.Stop()
	var (
		gone  bool // the caller went away
		cause *Error
	)
	for cause == nil {
		select {
		case <-sub.signal:
			evs, failed := s.waiters.take(sub)
			for _, we := range evs {
				if we.index <= after {
					continue
				}
				if ctx.Err() != nil && we.ev.Kind == locktable.EventGranted {
					// The caller left just as its grant committed: hand
					// the key on instead of answering nobody, unless
					// another request of the same holder is still there
					// to be answered with it.
					defer s.waiters.remove(sub)
					if s.waiters.leave(sub) {
						s.releaseUnanswered(we.ev, g.requestID)
					}
					return none, ctxError(ctx, Unavailable("client went away"))
				}
				s.waiters.remove(sub)
				return s.answerWaitEvent(g.key, we.ev)
			}
			if s.waiters.takeAgain(sub) {
				// A departed request of this holder cancelled the queue
				// place after our Wait had joined it: queue again.
				now, err := s.stamp()
				if err == nil {
					res, err = s.apply(s.waitCommand(g, now))
				}
				switch {
				case err != nil:
					s.waiters.remove(sub)
					return none, proposalError(err)
				case res.Err != nil:
					s.waiters.remove(sub)
					s.countQueueFull(res.Err)
					return none, s.commandError(res.Err, res.Now)
				case res.Granted:
					s.waiters.remove(sub)
					return wireLease(res.Lease, s.answerNow(res.Now)), nil
				}
				after = res.Index
			}
			if failed {
				// The queue place is in the replicated table: the same
				// request sent to the new leader keeps it.
				s.waiters.remove(sub)
				return none, &Error{Code: api.CodeNotLeader,
					Message: "leadership lost while waiting; send the same request to the leader"}
			}
		case <-ctx.Done():
			gone, cause = true, ctxError(ctx, Unavailable("client went away"))
		case <-s.closing:
			cause = Unavailable("shutting down")
		case <-backstopC:
			cause = s.heldNow(g.key, "wait elapsed")
		}
	}
	return s.giveUp(sub, g.requestID, after, gone, cause)
}

// countQueueFull counts a wait refused for a full queue under
// fencelock_wait_queue_full_total{scope}, and reports whether err was one.
func (s *Service) countQueueFull(err error) bool {
	var full *locktable.QueueFullError
	if !errors.As(err, &full) {
		return false
	}
	if full.Scope == "owner" {
		s.metrics.QuotaRefused.WithLabelValues(api.QuotaKeyWaiters).Inc()
		return true
	}
	s.metrics.QueueFull.WithLabelValues(full.Scope).Inc()
	return true
}

// giveUp takes a waiter out of the queue. If its grant was committed before
// the cancel, a caller that is gone has it released by token (so the next
// waiter gets the key now, not at expiry); a caller still there is
// answered with it.
func (s *Service) giveUp(sub *sub, id string, after uint64, gone bool, cause *Error) (api.Lease, *Error) {
	var none api.Lease
	defer s.waiters.remove(sub)
	if !s.waiters.leave(sub) {
		return none, cause // another request of the same holder keeps the position
	}
	res, err := s.cancelWait(sub.wk)
	if err != nil {
		// No leader: the next leader cancels waiters nobody serves.
		return none, cause
	}
	if res.Cancelled > 0 {
		s.metrics.WaitEnds.WithLabelValues("cancelled").Inc()
		return none, cause
	}
	evs, _ := s.waiters.take(sub)
	for _, we := range evs {
		if we.index <= after || we.index > res.Index {
			continue
		}
		if we.ev.Kind != locktable.EventGranted {
			return none, cause
		}
		if !gone {
			return s.answerWaitEvent(sub.wk.key, we.ev)
		}
		s.releaseUnanswered(we.ev, id)
		return none, cause
	}
	return none, cause
}

// cancelWait takes a queue place away for a request that gives up. A
// request of the same holder that joined after the giver-up looked (a
// client re-sending its wait after leaving a node it thought stuck) may
// have had its Wait applied before this cancel: it is told to queue again.
func (s *Service) cancelWait(wk waitKey) (*fsm.Result, error) {
	res, err := s.propose(fsm.Command{Op: fsm.OpCancelWait, Key: wk.key, Holder: wk.holder})
	if err == nil && res.Cancelled > 0 {
		s.waiters.requeue(wk)
	}
	return res, err
}

// releaseUnanswered releases, by token, a grant whose waiter went away
// before it could be told, so the next waiter gets the key now rather than
// at expiry. It names the wait's request id: if the client re-sent its wait
// (to this node or another) and was answered with this grant, the state
// machine leaves it held.
func (s *Service) releaseUnanswered(ev locktable.Event, id string) {
	rel, err := s.propose(fsm.Command{Op: fsm.OpRelease, RequestID: id, Key: ev.Key, Holder: ev.Holder, Token: ev.Token})
	released := err == nil && rel.Released
	s.log.Info("released a grant whose waiter went away", "key", ev.Key, "holder", ev.Holder,
		"token", ev.Token, "released", released)
}

func (s *Service) answerWaitEvent(key string, ev locktable.Event) (api.Lease, *Error) {
	if ev.Kind == locktable.EventWaitDropped {
		return api.Lease{}, s.heldNow(key, "wait elapsed")
	}
	if err := s.node.Covered(ev.Token, s.cfg.ApplyTimeout); err != nil {
		// Not answered as a grant: the caller retries, and the same
		// request id finds the grant once a node can vouch for its
		// token.
		return api.Lease{}, proposalError(err)
	}
	l := locktable.Lease{Key: ev.Key, Holder: ev.Holder, Token: ev.Token, Granted: ev.At, Expiry: ev.Expiry,
		TTL: locktable.Duration(ev.Expiry - ev.At)}
	return wireLease(l, s.answerNow(ev.At)), nil
}

// heldNow is the held refusal for a wait that elapsed, naming the current
// holder.
func (s *Service) heldNow(key, why string) *Error {
	e := &Error{Code: api.CodeHeld, Message: "held by another holder: " + why}
	if now, ok := s.clock.now(); ok {
		if l, ok := s.fsm.Get(key, now); ok {
			rem := ms(l.Remaining(now))
			e.Holder, e.RemainingMs = l.Holder, &rem
		}
	}
	return e
}

// ctxError is the error a call ended by its context answers: the cause
// the transport gave (a credential revoked while the call ran), else
// fallback.
func ctxError(ctx context.Context, fallback *Error) *Error {
	var e *Error
	if errors.As(context.Cause(ctx), &e) {
		return e
	}
	return fallback
}
