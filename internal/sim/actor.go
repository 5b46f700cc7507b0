package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/internal/sim/simcheck"
	"github.com/fencelock/fencelock/internal/sim/simclock"
)

// actor is one client process: the real client library (its keep-alive,
// retries and waits) on the process's own drifting, pausable clock,
// working under leases the way the safe-stop rule says a holder must: it
// acts only while the lease is alive and before its Deadline.
type actor struct {
	w     *world
	i     int
	rnd   *rand.Rand
	clk   *simclock.Clock
	drift float64 // its clock's, when no fault changes it
	net   *clientNet
	c     *client.Client
	seq   int
	// holding: between a grant's answer and the end of the work under it
	// (the failover focus's nemesis cuts a holder off)
	holding atomic.Bool
	addrs   []string // the nodes its client is given
	// With ACLs: its token's secret (under w.mu), and a new one the
	// nemesis gave it, taken up before its next acquire.
	secret string
	renew  atomic.Pointer[string]
	tokens int // new tokens taken up
	// With quotas: the draws of its bursts (burst.go), and how many it made.
	brnd   *rand.Rand
	bursts int
}

func newActor(w *world, i int, drift float64) *actor {
	a := &actor{w: w, i: i, rnd: w.stream(fmt.Sprintf("actor%d", i)), clk: simclock.New(w.t0, drift, w.dues), drift: drift}
	if w.debug {
		a.clk.Debug = func(format string, args ...any) { w.tracef(a.src(), format, args...) }
	}
	if w.cfg.Quotas {
		a.brnd = w.stream(fmt.Sprintf("burst%d", i))
	}
	a.net = &clientNet{w: w, a: a, cut: map[string]bool{}}
	for _, n := range w.cl.nodes {
		a.addrs = append(a.addrs, n.addr)
	}
	if !w.cfg.ACL {
		a.c = a.newClient("")
	} // else the operator makes it, with a token (bootACL)
	return a
}

// held is what the actor works under: a Lease or a session's lock.
type held interface {
	Err() error
	Deadline() time.Time
	Release(context.Context) error
}

// sessionHeld is a session lock, alive while its session is.
type sessionHeld struct {
	s *client.Session
	l *client.SessionLock
}

func (h sessionHeld) Err() error {
	select {
	case <-h.l.Done():
		return context.Cause(h.l.Context())
	default:
		return h.s.Err()
	}
}
func (h sessionHeld) Deadline() time.Time               { return h.s.Deadline() }
func (h sessionHeld) Release(ctx context.Context) error { return h.l.Release(ctx) }

// sessionAll is a session's locks taken together, alive while all are.
type sessionAll struct {
	s  *client.Session
	ls []*client.SessionLock
}

func (h sessionAll) Err() error {
	for _, l := range h.ls {
		if err := (sessionHeld{h.s, l}).Err(); err != nil {
			return err
		}
	}
	return nil
}
func (h sessionAll) Deadline() time.Time { return h.s.Deadline() }
func (h sessionAll) Release(ctx context.Context) error {
	var first error
	for _, l := range h.ls {
		if err := l.Release(ctx); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// src is the actor's name in the trace.
func (a *actor) src() string { return fmt.Sprintf("c%d", a.i) }

func (a *actor) sleep(d time.Duration) {
	done := make(chan struct{})
	a.clk.AfterFunc(d, func() { close(done) })
	<-done
}

func (a *actor) run(end time.Time) {
	for time.Now().Before(end) {
		a.sleep(time.Duration(a.rnd.Int64N(int64(400 * time.Millisecond))))
		if !time.Now().Before(end) {
			return
		}
		a.once()
	}
}

// once acquires one thing, works under it and lets it go.
func (a *actor) once() {
	if sec := a.renew.Swap(nil); sec != nil {
		// A new token after the old one was deleted: a process restarted
		// with it.
		a.c.Close()
		a.tokens++
		a.c = a.newClientNamed(*sec, fmt.Sprintf("client%d-t%d", a.i, a.tokens))
		a.w.mu.Lock()
		a.secret = *sec
		a.w.mu.Unlock()
	}
	if a.burstMove() {
		a.burst()
		return
	}
	a.seq++
	holder := a.own(fmt.Sprintf("c%d-%d", a.i, a.seq))
	ttl := a.w.cfg.TTLs[a.rnd.IntN(len(a.w.cfg.TTLs))]
	wait := time.Duration(a.rnd.Int64N(int64(3 * time.Second)))
	opts := []client.LeaseOption{client.WithTTL(ttl), client.WithHolder(holder), client.WithWait(wait)}
	ctx, cancel := context.WithTimeout(context.Background(), wait+10*time.Second)
	defer cancel()
	rec := &simcheck.Grant{Client: a.i, Holder: holder}
	recs := []*simcheck.Grant{rec} // a multi-key acquire has one per key
	var h held
	var sess *client.Session
	k := a.rnd.IntN(7)
	if oneKey(a.w.cfg.Focus) {
		k = 0 // one key, many waiting on it
	}
	switch k {
	case 0, 1:
		rec.Kind, rec.Key = "lock", fmt.Sprintf("lock/%d", a.rnd.IntN(2))
		if oneKey(a.w.cfg.Focus) {
			rec.Key = "lock/0"
		}
		if a.rnd.IntN(3) == 0 {
			// Should the lease expire, nobody gets the key for a while.
			opts = append(opts, client.WithLockDelay(time.Duration(50+a.rnd.IntN(950))*time.Millisecond))
		}
		l, err := a.c.Acquire(ctx, rec.Key, opts...)
		if err != nil {
			a.w.tracef(a.src(), "%s acquire %s: %v", holder, rec.Key, err)
			return
		}
		rec.Token, h = l.Token(), l
	case 2:
		rec.Kind, rec.Key, rec.Permits = "sem", "sem/0", 2
		l, err := a.c.AcquireSemaphore(ctx, rec.Key, 2, opts...)
		if err != nil {
			a.w.tracef(a.src(), "%s acquire %s: %v", holder, rec.Key, err)
			return
		}
		rec.Token, h = l.Token(), l
	case 3, 4:
		rec.Key = "rw/0"
		var l *client.Lease
		var err error
		if k == 3 {
			rec.Kind = "read"
			l, err = a.c.AcquireRead(ctx, rec.Key, opts...)
		} else {
			rec.Kind = "write"
			l, err = a.c.AcquireWrite(ctx, rec.Key, opts...)
		}
		if err != nil {
			a.w.tracef(a.src(), "%s acquire %s %s: %v", holder, rec.Kind, rec.Key, err)
			return
		}
		rec.Token, h = l.Token(), l
	case 5:
		rec.Kind, rec.Key = "lock", fmt.Sprintf("lock/%d", a.rnd.IntN(2))
		s, err := client.NewSession(ctx, a.c, client.WithSessionTTL(ttl), client.WithSessionHolder(holder))
		if err != nil {
			a.w.tracef(a.src(), "%s open session: %v", holder, err)
			return
		}
		sess = s
		l, err := s.Acquire(ctx, rec.Key, client.WithWait(wait))
		if err != nil {
			a.w.tracef(a.src(), "%s session acquire %s: %v", holder, rec.Key, err)
			a.closeSession(sess)
			return
		}
		rec.Token, h = l.Token(), sessionHeld{s, l}
	case 6:
		// Both exclusive keys at once, under a session.
		s, err := client.NewSession(ctx, a.c, client.WithSessionTTL(ttl), client.WithSessionHolder(holder))
		if err != nil {
			a.w.tracef(a.src(), "%s open session: %v", holder, err)
			return
		}
		sess = s
		ls, err := s.AcquireAll(ctx, []string{"lock/0", "lock/1"}, client.WithWait(wait))
		if err != nil {
			a.w.tracef(a.src(), "%s session acquire-all: %v", holder, err)
			a.closeSession(sess)
			return
		}
		recs = recs[:0]
		for _, l := range ls {
			recs = append(recs, &simcheck.Grant{Client: a.i, Holder: holder, Kind: "lock", Key: l.Key(), Token: l.Token()})
		}
		rec, h = recs[0], sessionAll{s, ls}
	}
	now := time.Now()
	// The holder acts from the answer on only if the lease is still
	// alive and within its Deadline by its own clock (a process paused
	// as the answer came reads it late).
	acting := h.Err() == nil && a.clk.Now().Before(h.Deadline())
	for _, r := range recs {
		r.Ack, r.Last, r.Acted = now, now, acting
		a.w.hist.Granted(r)
		a.w.tracef(a.src(), "%s holds %s %s token %d ttl %s", holder, r.Kind, r.Key, r.Token, ttl)
	}
	a.holding.Store(true)
	defer a.holding.Store(false)
	hold := time.Duration(a.rnd.Int64N(int64(2 * ttl)))
	step := ttl / 5
	if a.w.cfg.Focus == focusFailover {
		step = ttl / 20 // it acts up to its Deadline's edge
	}
	for spent := time.Duration(0); spent < hold; spent += step {
		a.sleep(step)
		if h.Err() != nil || !a.clk.Now().Before(h.Deadline()) {
			a.w.tracef(a.src(), "%s stops: %v", holder, h.Err())
			a.w.lost(simcheck.Loss{Grant: rec, TTL: ttl, At: time.Now(), Err: fmt.Sprint(h.Err())})
			break
		}
		for _, r := range recs {
			a.w.hist.Worked(r)
		}
	}
	rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer rcancel()
	if h.Err() == nil {
		err := h.Release(rctx)
		a.w.tracef(a.src(), "%s releases %s: %v", holder, rec.Key, err)
	}
	a.closeSession(sess)
	if sess == nil && a.rnd.IntN(3) == 0 {
		// A zombie: long after, it releases what it no longer holds,
		// which the server must refuse.
		a.sleep(time.Duration(a.rnd.Int64N(int64(2 * ttl))))
		zctx, zcancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer zcancel()
		ok, err := a.c.Release(zctx, rec.Key, holder, rec.Token)
		a.w.tracef(a.src(), "%s releases %s token %d again, late: %v %v", holder, rec.Key, rec.Token, ok, err)
	}
}

func (a *actor) closeSession(s *client.Session) {
	if s == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.Close(ctx)
}
