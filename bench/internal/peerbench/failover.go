package peerbench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// Failover measures, round after round, how long a cluster takes from the
// kill -9 of its leader to the first lock it grants: the time a user's
// work stands still when the leader's machine dies.
type Failover struct {
	// System and Options say what to measure; Options.Addr lists every
	// node, so that a fresh client finds the survivors.
	System  string
	Options Options
	// Kill kills the current leader (kill -9) and returns once it is dead.
	Kill func(ctx context.Context) error
	// Revive restarts the dead node on its data and returns once the
	// cluster has a leader again.
	Revive func(ctx context.Context) error
	// Rounds is how many kills; Attempt bounds one try at a grant (a
	// fresh connection and one try-once acquire); Timeout bounds a round.
	Rounds           int
	Attempt, Timeout time.Duration
	// Every is how often a new try starts while none has been granted
	// (default 50ms): the resolution of the measurement.
	Every time.Duration
	// Hold is how many leases, each of HoldTTL, a client takes before
	// each kill (through the nodes' address list, so on the leader that
	// is about to die); after the first grant a fresh client asks whether
	// each is still live under its token. Systems that cannot be asked
	// (no Validator) skip this. The failover guarantee is that none is
	// lost: a lease outlives the leader that granted it.
	Hold    int
	HoldTTL time.Duration
	// HoldPrefix starts the held leases' keys, which are
	// HoldPrefix/ROUND/I; default failover/held/ and a random run id, so
	// that runs a TTL apart do not meet each other's leases.
	HoldPrefix string
	// Progress, when set, is told each round's time.
	Progress func(round int, d time.Duration)
}

// FailoverResult is one run of Failover: every round's time to the first
// grant, in round order, and their summary.
type FailoverResult struct {
	System  string
	Times   []time.Duration
	Summary Summary
	// Held counts the leases held across the kills and checked after
	// them (Failover.Hold per round); Lost, those no longer live.
	Held, Lost int
}

// Run runs the rounds. Before each kill the cluster must grant a lock
// (the revived node has rejoined and a leader serves), so that each round
// starts from a healthy cluster.
func (f Failover) Run(ctx context.Context) (FailoverResult, error) {
	if f.Rounds <= 0 || f.Attempt <= 0 || f.Timeout <= 0 || f.Kill == nil || f.Revive == nil {
		return FailoverResult{}, errors.New("peerbench: failover: rounds, attempt, timeout, kill and revive are required")
	}
	res := FailoverResult{System: f.System}
	if f.HoldPrefix == "" {
		f.HoldPrefix = fmt.Sprintf("failover/held/%08x", rand.Uint32())
	}
	for round := 1; round <= f.Rounds; round++ {
		if _, err := f.firstGrant(ctx, round, "warm"); err != nil {
			return res, fmt.Errorf("peerbench: failover round %d: the cluster grants nothing before the kill: %w", round, err)
		}
		held, err := f.hold(ctx, round)
		if err != nil {
			return res, fmt.Errorf("peerbench: failover round %d: %w", round, err)
		}
		killed := time.Now()
		if err := f.Kill(ctx); err != nil {
			return res, fmt.Errorf("peerbench: failover round %d: kill: %w", round, err)
		}
		granted, err := f.firstGrant(ctx, round, "after")
		if err != nil {
			return res, fmt.Errorf("peerbench: failover round %d: %w", round, err)
		}
		lost, err := f.lost(ctx, held)
		if err != nil {
			return res, fmt.Errorf("peerbench: failover round %d: checking the held leases: %w", round, err)
		}
		res.Held += len(held)
		res.Lost += lost
		d := granted.Sub(killed)
		res.Times = append(res.Times, d)
		if f.Progress != nil {
			f.Progress(round, d)
		}
		if err := f.Revive(ctx); err != nil {
			return res, fmt.Errorf("peerbench: failover round %d: revive: %w", round, err)
		}
	}
	res.Summary = Summarize(append([]time.Duration(nil), res.Times...))
	return res, nil
}

// firstGrant starts a try at a fresh key through a fresh connection every
// Every (what clients that lost their server do, many of them), each
// bounded by Attempt, until one is granted or the round's timeout passes,
// and returns when the first grant was answered. Overlapping tries keep a
// try that hangs on the dead node from hiding a grant the survivors could
// already give.
func (f Failover) firstGrant(ctx context.Context, round int, phase string) (time.Time, error) {
	rctx, cancel := context.WithTimeout(ctx, f.Timeout)
	defer cancel()
	every := f.Every
	if every <= 0 {
		every = 50 * time.Millisecond
	}
	type outcome struct {
		at  time.Time
		err error
	}
	results := make(chan outcome, int(f.Timeout/every)+2)
	var wg sync.WaitGroup
	defer wg.Wait()
	tick := time.NewTicker(every)
	defer tick.Stop()
	var last error
	for attempt := 0; ; attempt++ {
		key := fmt.Sprintf("failover/%d/%s/%d", round, phase, attempt)
		wg.Add(1)
		go func() {
			defer wg.Done()
			at, err := f.try(rctx, key)
			results <- outcome{at, err}
		}()
		for waiting := true; waiting; {
			select {
			case r := <-results:
				if r.err == nil {
					return r.at, nil
				}
				last = r.err
			case <-tick.C:
				waiting = false
			case <-rctx.Done():
				return time.Time{}, fmt.Errorf("no grant in %v (last error: %v)", f.Timeout, last)
			}
		}
	}
}

func (f Failover) try(ctx context.Context, key string) (time.Time, error) {
	actx, cancel := context.WithTimeout(ctx, f.Attempt)
	defer cancel()
	o := f.Options
	o.DialTimeout = f.Attempt
	o.Clients = 1
	sys, err := Open(actx, f.System, o)
	if err != nil {
		return time.Time{}, err
	}
	defer sys.Close()
	c, err := sys.NewClient(actx, 0)
	if err != nil {
		return time.Time{}, err
	}
	defer c.Close()
	if p, ok := sys.(Preparer); ok {
		if err := p.Prepare(actx, []string{key}); err != nil {
			return time.Time{}, err
		}
	}
	l, err := c.Lock(actx, key)
	if err != nil {
		return time.Time{}, err
	}
	at := time.Now()
	l.Unlock(actx) // best effort; the lease expires anyway
	return at, nil
}

// heldLease is one lease taken before a kill: its key and token.
type heldLease struct {
	key   string
	token uint64
}

// hold takes f.Hold leases for the round (none for a system without a
// Validator). They are never released: closing the client and the
// connection once they are taken ends none of them (each is a lease of
// its own, which lapses by its TTL).
func (f Failover) hold(ctx context.Context, round int) ([]heldLease, error) {
	if f.Hold <= 0 {
		return nil, nil
	}
	hctx, cancel := context.WithTimeout(ctx, f.Timeout)
	defer cancel()
	o := f.Options
	o.Clients = 1
	sys, err := Open(hctx, f.System, o)
	if err != nil {
		return nil, err
	}
	if _, ok := sys.(Validator); !ok {
		sys.Close()
		return nil, nil
	}
	defer sys.Close()
	c, err := sys.NewClient(hctx, 0)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	ttl := f.HoldTTL
	if ttl <= 0 {
		ttl = 30 * time.Second
	}
	held := make([]heldLease, 0, f.Hold)
	for i := range f.Hold {
		key := fmt.Sprintf("%s/%d/%d", f.HoldPrefix, round, i)
		l, err := c.Hold(hctx, key, ttl)
		if err != nil {
			return nil, fmt.Errorf("holding %s: %w", key, err)
		}
		held = append(held, heldLease{key, l.Token()})
	}
	return held, nil
}

// lost asks the survivors, through a fresh client, how many of held are
// no longer their key's live grant.
func (f Failover) lost(ctx context.Context, held []heldLease) (int, error) {
	if len(held) == 0 {
		return 0, nil
	}
	vctx, cancel := context.WithTimeout(ctx, f.Timeout)
	defer cancel()
	sys, err := Open(vctx, f.System, f.Options)
	if err != nil {
		return 0, err
	}
	defer sys.Close()
	v := sys.(Validator)
	lost := 0
	for _, h := range held {
		ok, err := v.Valid(vctx, h.key, h.token)
		if err != nil {
			return 0, err
		}
		if !ok {
			lost++
		}
	}
	return lost, nil
}
