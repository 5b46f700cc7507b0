package sim

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/internal/e2e"
	"github.com/fencelock/fencelock/internal/sim/simcheck"
)

// The prober is one more client process, recording every call it makes
// with its invocation and answer on the world's virtual time, for the
// porcupine models of internal/e2e: plain acquires, waits, extends,
// releases, checks and gets on two keys; try-once semaphore and
// read/write holds; multi-key acquires. Its leases outlast any world
// (the models have no clock), and its keys change every proberEpoch so
// that a hold an unanswered call may have left behind blocks one epoch's
// keys only, and each key's history stays short for the checker.

const (
	proberTTL   = 10 * time.Minute
	proberEpoch = 4 * time.Second
	proberOp    = 3 * time.Second // each call's timeout
)

// probes is what the prober recorded (its one goroutine writes them).
type probes struct {
	lin    *e2e.Recorder
	shared []e2e.SharedOp
	multi  map[int][]e2e.MultiOp        // by epoch: each one's keys are e2e.MultiKeys
	sess   map[int][]simcheck.SessionOp // by epoch
}

// probe runs a's calls until end; what it recorded is in w.probes.
func (a *actor) probe(end time.Time) {
	p := a.w.probes
	start := a.w.t0
	gen := 0
	held := map[string]uint64{}
	var sess proberSession
	var seen []uint64
	anyToken := func() uint64 {
		if len(seen) == 0 || a.rnd.IntN(4) == 0 {
			return uint64(a.rnd.IntN(50) + 1)
		}
		return seen[a.rnd.IntN(len(seen))]
	}
	for time.Now().Before(end) {
		a.sleep(time.Duration(40+a.rnd.IntN(200)) * time.Millisecond)
		epoch := int(time.Since(start) / proberEpoch)
		holder := a.own(fmt.Sprintf("p-%d", gen))
		key := fmt.Sprintf("lin/%d/%d", epoch, a.rnd.IntN(2))
		ctx, cancel := context.WithTimeout(context.Background(), proberOp)
		switch r := a.rnd.IntN(100); {
		case r < 18:
			id := p.lin.Start(a.i, e2e.Input{Kind: e2e.Acquire, Key: key, Holder: holder, TTL: proberTTL})
			lk, err := a.c.Grant(ctx, key, holder, proberTTL, 0)
			res := a.outcome("acquire", err, client.ErrHeld)
			p.lin.End(id, e2e.Output{Result: res, Token: lk.Token})
			switch res {
			case e2e.OK:
				held[key] = lk.Token
				seen = append(seen, lk.Token)
			case e2e.Unknown:
				delete(held, key)
			}
		case r < 30:
			wait := time.Duration(100+a.rnd.IntN(600)) * time.Millisecond
			cancel()
			ctx, cancel = context.WithTimeout(context.Background(), proberOp+wait)
			id := p.lin.Wait(a.i, e2e.Input{Key: key, Holder: holder, TTL: proberTTL})
			lk, err := a.c.Grant(ctx, key, holder, proberTTL, wait)
			res := a.outcome("wait", err, client.ErrHeld)
			p.lin.EndWait(id, e2e.Output{Result: res, Token: lk.Token})
			if res == e2e.OK {
				held[key] = lk.Token
				seen = append(seen, lk.Token)
			} else {
				delete(held, key)
			}
		case r < 42:
			tok, ok := held[key]
			if !ok || a.rnd.IntN(5) == 0 {
				tok = anyToken()
			}
			id := p.lin.Start(a.i, e2e.Input{Kind: e2e.Extend, Key: key, Holder: holder, Token: tok, TTL: proberTTL})
			_, err := a.c.Extend(ctx, key, holder, tok, proberTTL)
			p.lin.End(id, e2e.Output{Result: a.outcome("extend", err, client.ErrNotHeld)})
		case r < 56:
			tok, ok := held[key]
			if !ok || a.rnd.IntN(5) == 0 {
				tok = anyToken()
			}
			if a.rnd.IntN(6) == 0 {
				tok = 0 // by holder alone
			}
			id := p.lin.Start(a.i, e2e.Input{Kind: e2e.Release, Key: key, Holder: holder, Token: tok})
			ok, err := a.c.Release(ctx, key, holder, tok)
			res := a.outcome("release", err, nil)
			p.lin.End(id, e2e.Output{Result: res, Bool: ok})
			if res != e2e.OK || ok {
				delete(held, key)
			}
		case r < 66:
			tok := anyToken()
			if t, ok := held[key]; ok && a.rnd.IntN(2) == 0 {
				tok = t
			}
			id := p.lin.Start(a.i, e2e.Input{Kind: e2e.Check, Key: key, Token: tok})
			valid, err := a.c.Check(ctx, key, tok)
			p.lin.End(id, e2e.Output{Result: a.outcome("check", err, nil), Bool: valid})
		case r < 74:
			id := p.lin.Start(a.i, e2e.Input{Kind: e2e.Get, Key: key})
			lk, err := a.c.Get(ctx, key)
			res := a.outcome("get", err, client.ErrNotFound)
			p.lin.End(id, e2e.Output{Result: res, Holder: lk.Holder, Token: lk.Token})
			if res == e2e.OK {
				seen = append(seen, lk.Token)
			}
		case r < 84:
			if !a.probeShared(ctx, epoch, holder) {
				gen++
			}
		case r < 94:
			if !a.probeMulti(ctx, epoch, holder) {
				gen++
			}
		default:
			a.probeSession(ctx, epoch, &sess)
		}
		cancel()
		if len(held) == 0 && a.rnd.IntN(4) == 0 {
			// A fresh holder now and then: the keys see more than one.
			gen++
		}
	}
}

// outcome classes an answer for the models; an answer no fault explains
// (a well-formed call refused as invalid, an internal error) is a
// violation.
func (a *actor) outcome(op string, err, refusal error) e2e.Result {
	switch {
	case err == nil:
		return e2e.OK
	case refusal != nil && errors.Is(err, refusal):
		return e2e.Refused
	case noSpace(err):
		// The log cannot write for lack of disk space: a fault of the
		// world's, answered as the design says (507 no_space,
		// client.ErrNoSpace).
	case errors.Is(err, client.ErrInvalid) || errors.Is(err, client.ErrInternal):
		a.w.violate(a.src(), "prober: %s answered %v", op, err)
	}
	return e2e.Unknown
}

// noSpace says whether err is the answer of a node whose log has no room.
func noSpace(err error) bool {
	return errors.Is(err, client.ErrNoSpace)
}

// probeShared takes one hold of the epoch's semaphore (2 permits) or
// read/write lock and releases it; false: some call had no definite
// answer, so the hold may still be there under this holder.
func (a *actor) probeShared(ctx context.Context, epoch int, holder string) bool {
	p := a.w.probes
	since := p.lin.Since // one clock for every history
	in := e2e.SharedInput{Kind: e2e.SharedAcquire, Key: fmt.Sprintf("psem/%d", epoch), Holder: holder, Permits: 2}
	opts := []client.LeaseOption{client.WithTTL(proberTTL), client.WithHolder(holder)}
	if a.rnd.IntN(2) == 0 {
		in.Key, in.Permits, in.Write = fmt.Sprintf("prw/%d", epoch), 0, a.rnd.IntN(10) < 3
		if in.Write {
			opts = append(opts, client.WithWrite())
		} else {
			opts = append(opts, client.WithRead())
		}
	} else {
		opts = append(opts, client.WithPermits(2))
	}
	o := e2e.SharedOp{Client: a.i, Input: in, Call: since()}
	l, err := a.c.TryAcquire(ctx, in.Key, opts...)
	o.Return = since()
	switch res := a.outcome("shared acquire", err, client.ErrHeld); res {
	case e2e.OK:
		o.Output = e2e.SharedOutput{Result: res, Token: l.Token()}
	default:
		o.Output = e2e.SharedOutput{Result: res}
	}
	p.shared = append(p.shared, o)
	if err != nil {
		return o.Output.Result != e2e.Unknown
	}
	a.sleep(time.Duration(10+a.rnd.IntN(50)) * time.Millisecond)
	r := e2e.SharedOp{Client: a.i, Input: e2e.SharedInput{Kind: e2e.SharedRelease, Key: in.Key, Holder: holder, Token: l.Token()}, Call: since()}
	rctx, cancel := context.WithTimeout(context.Background(), proberOp)
	defer cancel()
	err = l.Release(rctx)
	r.Return = since()
	var le *client.LostError
	definite := true
	switch {
	case err == nil:
		r.Output = e2e.SharedOutput{Result: e2e.OK, Released: true}
	case errors.Is(err, client.ErrNotHeld) && !errors.As(err, &le):
		r.Output = e2e.SharedOutput{Result: e2e.OK}
	default:
		definite = false
	}
	p.shared = append(p.shared, r)
	return definite
}

// probeMulti takes two or three of the epoch's multi-key keys at once
// and releases them one by one; false as for probeShared.
func (a *actor) probeMulti(ctx context.Context, epoch int, holder string) bool {
	p := a.w.probes
	since := p.lin.Since
	skip := a.rnd.IntN(len(e2e.MultiKeys) + 1) // len: all of them
	var names, keys []string
	for i, k := range e2e.MultiKeys {
		if i != skip {
			names = append(names, k)
			keys = append(keys, fmt.Sprintf("mk/%d/%s", epoch, k))
		}
	}
	o := e2e.MultiOp{Client: a.i, Input: e2e.MultiInput{Kind: e2e.MultiAcquire, Keys: strings.Join(names, ","), Holder: holder}, Call: since()}
	lks, err := a.c.AcquireAll(ctx, keys, holder, proberTTL, client.GrantOptions{})
	o.Return = since()
	switch res := a.outcome("acquire-all", err, client.ErrHeld); res {
	case e2e.OK:
		toks := make([]string, len(lks))
		for i, lk := range lks {
			toks[i] = fmt.Sprint(lk.Token)
		}
		o.Output = e2e.MultiOutput{Result: res, Tokens: strings.Join(toks, ",")}
	default:
		o.Output = e2e.MultiOutput{Result: res}
	}
	p.multi[epoch] = append(p.multi[epoch], o)
	if err != nil {
		return o.Output.Result != e2e.Unknown
	}
	a.sleep(time.Duration(10+a.rnd.IntN(50)) * time.Millisecond)
	definite := true
	prefix := fmt.Sprintf("mk/%d/", epoch)
	for _, lk := range lks {
		rctx, cancel := context.WithTimeout(context.Background(), proberOp)
		r := e2e.MultiOp{Client: a.i, Input: e2e.MultiInput{Kind: e2e.MultiRelease, Keys: strings.TrimPrefix(lk.Key, prefix), Holder: holder, Token: lk.Token}, Call: since()}
		ok, err := a.c.Release(rctx, lk.Key, holder, lk.Token)
		r.Return = since()
		cancel()
		if res := a.outcome("release", err, nil); res == e2e.OK {
			r.Output = e2e.MultiOutput{Result: res, Released: ok}
		} else {
			definite = false
		}
		p.multi[epoch] = append(p.multi[epoch], r)
	}
	return definite
}
