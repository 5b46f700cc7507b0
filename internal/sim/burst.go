package sim

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/internal/sim/simcheck"
)

// In worlds with quotas an actor now and then takes several locks at
// once, each on a goroutine of its own, so that one principal has more
// than one proposal in flight at the leader: the quota must count those
// too, not only what the table has applied (service/quota.go), and the
// committed-log check (History.CountOwners) sees a principal taken past
// its quota if it does not. Its draws come from a stream of its own,
// made only in worlds with quotas, so the other worlds are unchanged.

const (
	// burstEvery: one move in burstEvery is a burst.
	burstEvery = 4
	// burstStagger is the time between two calls of a burst.
	burstStagger = 200 * time.Microsecond
)

// burstMove says whether the actor's next move is a burst.
func (a *actor) burstMove() bool {
	return a.brnd != nil && a.brnd.IntN(burstEvery) == 0
}

// burst acquires 2 to 5 keys of the actor's own at once, holds what it
// was granted for a moment and releases it.
func (a *actor) burst() {
	a.bursts++
	n := 2 + a.brnd.IntN(4) // up to one past the largest lease quota the world draws (quota.go)
	ttl := a.w.cfg.TTLs[a.brnd.IntN(len(a.w.cfg.TTLs))]
	hold := time.Duration(a.brnd.Int64N(int64(ttl / 2)))
	holders := make([]string, n)
	keys := make([]string, n)
	for j := range n {
		holders[j] = a.own(fmt.Sprintf("c%d-b%d-%d", a.i, a.bursts, j))
		keys[j] = fmt.Sprintf("lock/burst-c%d-%d", a.i, j) // under the actors' own prefix (actorPrefixes)
	}
	// Each call leaves at an instant of its own, 200 µs apart: well inside
	// one another's round trip, so they are in flight together, and in an
	// order the seed decides, not the scheduler.
	var wg sync.WaitGroup
	for j := range n {
		wg.Go(func() {
			if j > 0 {
				a.sleep(time.Duration(j) * burstStagger)
			}
			a.burstOne(keys[j], holders[j], ttl, hold)
		})
	}
	wg.Wait()
}

// burstOne is one lock of a burst.
func (a *actor) burstOne(key, holder string, ttl, hold time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := a.c.Acquire(ctx, key, client.WithTTL(ttl), client.WithHolder(holder))
	if err != nil {
		a.w.tracef(a.src(), "%s burst acquire %s: %v", holder, key, err)
		return
	}
	now := time.Now()
	rec := &simcheck.Grant{Client: a.i, Holder: holder, Kind: "lock", Key: key, Token: l.Token(), Ack: now, Last: now,
		Acted: l.Err() == nil && a.clk.Now().Before(l.Deadline())}
	a.w.hist.Granted(rec)
	a.w.tracef(a.src(), "%s holds lock %s token %d ttl %s (burst)", holder, key, rec.Token, ttl)
	a.sleep(hold)
	if l.Err() != nil {
		return
	}
	rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer rcancel()
	err = l.Release(rctx)
	a.w.tracef(a.src(), "%s releases %s: %v (burst)", holder, key, err)
}
