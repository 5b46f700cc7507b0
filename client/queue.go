package client

import (
	"context"
	"errors"
	"time"
)

// A wait in a key's queue (Acquire, Grant with a wait, a Session's
// Acquire) is one queue place kept for as long as the wait lasts, whatever
// happens to the node serving it:
//
//   - The server waits at most an hour per request (api.MaxWait), so a
//     longer wait is sent in rounds. Each round goes out roundOverlap
//     before the one before it ends, under the same request id and holder:
//     the table keeps one place per (key, holder), and a Wait applied
//     while the holder is queued keeps its place and takes the new
//     deadline, so the place outlives every round. The round it
//     overlapped then ends held on the server (its place is the new
//     round's) and is not answered to the caller.
//   - A round whose node dies, freezes or stops leading is re-sent by do
//     to the next node under the same id, which keeps its place there, and
//     with what is left of the round, so the end of the wait stays where
//     it was.
//   - A round whose retries all failed (no leader for longer than one
//     call's retries) is sent again, up to maxOutages times in a row, past
//     the end of the wait if need be: a wait ends held, which says the key
//     is held, once a node can say so, and ends unreachable only when no
//     node answered for that long.

// roundOverlap is how long before a round ends the next is sent: ample
// for it to be applied through an election, however slow.
const roundOverlap = time.Minute

// maxOutages is how many times in a row a waiting acquire starts its
// retries again after they all failed (each time about 1.3 to 2.6 s)
// before it reports the cluster unreachable.
const maxOutages = 3

// round is one request of a wait, answered.
type round struct {
	lk  Lock
	err error
}

// queue asks for g's key once (wait 0), for up to wait (wait > 0), or
// until ctx ends (wait < 0), in rounds of at most maxWait under g.id. It
// returns the grant and the send time to date it from: that of the first
// round. Every round carries g.id, so the answer to a later round may be
// the server's record of a grant it made during an earlier one whose
// answer was lost (an outage, then a round sent again): only the first
// send is sure to precede the grant (internal/sim found the lease dated
// from the later round and held past its end on the server). A grant
// dated long ago is extended at once (start). On error every round has
// returned (the time returned then is the first round's too).
func (c *Client) queue(ctx context.Context, g grantCall, wait time.Duration) (Lock, time.Time, error) {
	if wait == 0 {
		sent := c.clock.Now()
		g.wait = 0
		lk, err := c.grant(ctx, g)
		return lk, sent, err
	}
	forever := wait < 0
	first := c.clock.Now() // the lease is dated from here
	end := first.Add(wait)
	// roundFor is the wait one round asks for, sent now: what is left of
	// the wait, at most the server's longest, and at least a millisecond
	// so that a round sent past the end (after an outage) is still a wait
	// under g.id, answered with the grant it may have had meanwhile.
	roundFor := func() time.Duration {
		if forever {
			return maxWaitRound
		}
		return max(min(end.Sub(c.clock.Now()), maxWaitRound), time.Millisecond)
	}
	results := make(chan round)
	out := 0
	var next Timer // sends the next round before the newest ends
	nextC := make(chan struct{}, 1)
	defer func() {
		if next != nil {
			next.Stop()
		}
	}()
	send := func() {
		out++
		r := g
		r.wait = roundFor()
		sent := c.clock.Now()
		if next != nil {
			next.Stop()
			next = nil
		}
		if forever || sent.Add(r.wait).Before(end) {
			next = c.clock.AfterFunc(max(r.wait-roundOverlap, r.wait/2), func() {
				select {
				case nextC <- struct{}{}:
				default:
				}
			})
		}
		go func() {
			lk, err := c.grant(ctx, r)
			results <- round{lk: lk, err: err}
		}()
	}
	// drain waits for the rounds still out and returns every answer.
	drain := func(got round) []round {
		all := []round{got}
		for ; out > 0; out-- {
			all = append(all, <-results)
		}
		return all
	}
	outages := 0
	send()
	for {
		select {
		case <-nextC:
			send()
		case r := <-results:
			out--
			switch {
			case r.err == nil:
				return pick(drain(r)), first, nil
			case ctx.Err() != nil:
				// A round may have been granted as ctx ended: give back
				// what we were told of (a grant nobody was told of, the
				// server hands on itself).
				for _, o := range drain(r) {
					if o.err == nil {
						c.releaseQuietly(o.lk.Key, o.lk.Holder, o.lk.Token)
					}
				}
				return Lock{}, first, r.err
			case out > 0 && (errors.Is(r.err, ErrHeld) || outage(r.err)):
				// An older round ended (it was overlapped) or failed: the
				// newer one out holds the place.
			case errors.Is(r.err, ErrHeld):
				outages = 0
				if !forever && end.Sub(c.clock.Now()) < time.Millisecond {
					return Lock{}, first, r.err
				}
				send() // answered before its end (a node's clock ahead of ours): go on
			case outage(r.err) && outages < maxOutages:
				outages++
				send()
			default:
				all := drain(r)
				for _, o := range all {
					if o.err == nil {
						return pick(all), first, nil
					}
				}
				return Lock{}, first, r.err
			}
		}
	}
}

// pick is the grant a wait answers with, of the rounds' answers: the
// highest token (a renewal under the same holder supersedes the token
// before it).
func pick(all []round) Lock {
	var best round
	ok := false
	for _, r := range all {
		if r.err != nil {
			continue
		}
		if !ok || r.lk.Token > best.lk.Token {
			best, ok = r, true
		}
	}
	return best.lk
}

// outage reports whether err says no node could serve the call for now:
// none answered, or none had a leader. A failure no retry can mend (no
// server anywhere, TLS set up wrong) is none.
func outage(err error) bool {
	return (errors.Is(err, ErrUnavailable) || errors.Is(err, ErrUnreachable)) && !final(err)
}
