package sim

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/internal/sim/simcheck"
)

// probeSession makes one session call of the epoch's: opens a session
// when the prober has none, else takes or releases one of the epoch's two
// keys under it, or closes it. The session's id and locks are the
// prober's for this epoch (ps); false: a call had no definite answer, so
// its holder is not used again.
func (a *actor) probeSession(ctx context.Context, epoch int, ps *proberSession) bool {
	p := a.w.probes
	since := p.lin.Since
	if ps.epoch != epoch || ps.held == nil {
		*ps = proberSession{epoch: epoch, held: map[string]uint64{}}
	}
	keys := []string{fmt.Sprintf("pss/%d/a", epoch), fmt.Sprintf("pss/%d/b", epoch)}
	rec := func(in simcheck.SessionInput, call time.Duration, out simcheck.SessionOutput) {
		p.sess[epoch] = append(p.sess[epoch], simcheck.SessionOp{Client: a.i, Input: in, Output: out, Call: call, Return: since()})
	}
	result := func(op string, err error) simcheck.SessionResult {
		switch {
		case err == nil:
			return simcheck.SessionOK
		case errors.Is(err, client.ErrHeld):
			return simcheck.SessionRefused
		case errors.Is(err, client.ErrNoSession):
			return simcheck.SessionGone
		}
		a.outcome(op, err, nil)
		return simcheck.SessionUnknown
	}
	if ps.id == 0 {
		ps.gen++
		holder := a.own(fmt.Sprintf("ps-%d-%d", epoch, ps.gen))
		in := simcheck.SessionInput{Kind: simcheck.SessionOpen, Holder: holder}
		call := since()
		info, err := a.c.OpenSession(ctx, holder, proberTTL)
		res := result("session open", err)
		rec(in, call, simcheck.SessionOutput{Result: res, Session: info.ID})
		if res == simcheck.SessionOK {
			ps.id, ps.holder = info.ID, holder
			return true
		}
		return res != simcheck.SessionUnknown
	}
	in := simcheck.SessionInput{Session: ps.id, Holder: ps.holder}
	call := since()
	switch r := a.rnd.IntN(10); {
	case r < 5:
		in.Kind, in.Key = simcheck.SessionAcquire, keys[a.rnd.IntN(2)]
		lk, err := a.c.GrantWith(ctx, in.Key, ps.holder, 0, 0, client.GrantOptions{Session: ps.id})
		res := result("session acquire", err)
		rec(in, call, simcheck.SessionOutput{Result: res, Token: lk.Token})
		if res == simcheck.SessionOK {
			ps.held[in.Key] = lk.Token
		}
		if res == simcheck.SessionUnknown {
			ps.id = 0 // never used again
			return false
		}
	case r < 8:
		key := keys[a.rnd.IntN(2)]
		tok, ok := ps.held[key]
		if !ok {
			return true
		}
		in.Kind, in.Key, in.Token = simcheck.SessionRelease, key, tok
		released, err := a.c.Release(ctx, key, ps.holder, tok)
		res := result("session release", err)
		rec(in, call, simcheck.SessionOutput{Result: res, Released: released})
		delete(ps.held, key)
		if res == simcheck.SessionUnknown {
			ps.id = 0
			return false
		}
	default:
		in.Kind = simcheck.SessionClose
		_, err := a.c.CloseSession(ctx, ps.id, ps.holder)
		res := result("session close", err)
		rec(in, call, simcheck.SessionOutput{Result: res})
		ps.id, ps.held = 0, map[string]uint64{}
		return res != simcheck.SessionUnknown
	}
	return true
}

// proberSession is the prober's session of an epoch.
type proberSession struct {
	epoch  int
	gen    int
	id     uint64
	holder string
	held   map[string]uint64
}
