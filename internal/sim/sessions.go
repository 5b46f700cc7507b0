package sim

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/fencelock/fencelock/client"
)

// The porcupine model of sessions, and the prober's session calls it
// checks: a session is opened for a holder (the server names it), locks
// are taken under it (try-once) and released, and it is closed, which
// releases every lock under it. A lock under a session is granted when
// the key is free or already the session's (a renewal: a new token),
// with a token above any the key has carried; refused when another
// session holds the key; answered no_session (gone) when the session is
// closed. The sessions' TTL outlasts any world, so nothing expires; each
// epoch's keys are a history of their own.

// sessKind is a session call.
type sessKind uint8

const (
	sessOpen sessKind = iota
	sessAcquire
	sessRelease
	sessClose
)

// sessResult is how a session call ended.
type sessResult uint8

const (
	sessUnknown sessResult = iota // no answer: it may or may not have happened
	sessOK
	sessRefused // held by another session
	sessGone    // no such session (closed)
)

// sessInput is one call: Session is the server's id of the session (an
// open's is in its output), Key and Token a lock's.
type sessInput struct {
	Kind    sessKind
	Holder  string
	Session uint64
	Key     string
	Token   uint64
}

// sessOutput is its answer: an open's session id, an acquire's token, a
// release's released.
type sessOutput struct {
	Result   sessResult
	Session  uint64
	Token    uint64
	Released bool
}

// sessOp is one recorded call.
type sessOp struct {
	Client       int
	Input        sessInput
	Output       sessOutput
	Call, Return time.Duration
}

func (o sessOp) String() string {
	res := map[sessResult]string{sessUnknown: "unknown", sessOK: "ok", sessRefused: "refused", sessGone: "gone"}[o.Output.Result]
	in := o.Input
	switch in.Kind {
	case sessOpen:
		return fmt.Sprintf("open %s: %s session %d", in.Holder, res, o.Output.Session)
	case sessAcquire:
		return fmt.Sprintf("acquire %s under %d (%s): %s token %d", in.Key, in.Session, in.Holder, res, o.Output.Token)
	case sessRelease:
		return fmt.Sprintf("release %s %s token %d: %s released=%v", in.Key, in.Holder, in.Token, res, o.Output.Released)
	}
	return fmt.Sprintf("close %d (%s): %s", in.Session, in.Holder, res)
}

// sessKey is one key's state: the session holding it (0: free) and its
// token (0: taken by an acquire whose answer was lost), and the largest
// token it has carried.
type sessKey struct {
	Session, Token, Max uint64
}

// sessState: the sessions open (id -> holder) and the keys, both as
// sorted slices, so that states compare by value.
type sessState struct {
	open string // "id=holder;..." sorted
	keys string // "key=session/token/max;..." sorted
}

func encodeSess(open map[uint64]string, keys map[string]sessKey) sessState {
	var o, k []string
	for _, id := range slices.Sorted(maps.Keys(open)) {
		o = append(o, fmt.Sprintf("%d=%s", id, open[id]))
	}
	for _, key := range slices.Sorted(maps.Keys(keys)) {
		s := keys[key]
		k = append(k, fmt.Sprintf("%s=%d/%d/%d", key, s.Session, s.Token, s.Max))
	}
	return sessState{open: strings.Join(o, ";"), keys: strings.Join(k, ";")}
}

func decodeSess(s sessState) (map[uint64]string, map[string]sessKey) {
	open, keys := map[uint64]string{}, map[string]sessKey{}
	for _, p := range strings.Split(s.open, ";") {
		var id uint64
		var h string
		if i := strings.IndexByte(p, '='); i > 0 {
			fmt.Sscan(p[:i], &id)
			h = p[i+1:]
			open[id] = h
		}
	}
	for _, p := range strings.Split(s.keys, ";") {
		if i := strings.IndexByte(p, '='); i > 0 {
			var k sessKey
			fmt.Sscanf(p[i+1:], "%d/%d/%d", &k.Session, &k.Token, &k.Max)
			keys[p[:i]] = k
		}
	}
	return open, keys
}

func sessStep(st sessState, in sessInput, out sessOutput) []sessState {
	open, keys := decodeSess(st)
	same := []sessState{st}
	switch in.Kind {
	case sessOpen:
		switch out.Result {
		case sessOK:
			if _, dup := open[out.Session]; dup || out.Session == 0 {
				return nil
			}
			open[out.Session] = in.Holder
			return []sessState{encodeSess(open, keys)}
		case sessUnknown:
			return same // its session, if any, is never used
		}
		return nil
	case sessAcquire:
		k := keys[in.Key]
		_, live := open[in.Session]
		grantable := live && (k.Session == 0 || k.Session == in.Session)
		switch out.Result {
		case sessOK:
			if !grantable || out.Token <= k.Max {
				return nil
			}
			keys[in.Key] = sessKey{Session: in.Session, Token: out.Token, Max: out.Token}
			return []sessState{encodeSess(open, keys)}
		case sessRefused:
			if live && !grantable {
				return same
			}
			return nil
		case sessGone:
			if !live {
				return same
			}
			return nil
		default:
			if !grantable {
				return same
			}
			keys[in.Key] = sessKey{Session: in.Session, Max: k.Max}
			return []sessState{st, encodeSess(open, keys)}
		}
	case sessRelease:
		k := keys[in.Key]
		holds := k.Session != 0 && open[k.Session] == in.Holder && (k.Token == in.Token || k.Token == 0 && in.Token > k.Max)
		freed := maps.Clone(keys)
		freed[in.Key] = sessKey{Max: max(k.Max, in.Token)}
		switch {
		case out.Result == sessOK && out.Released:
			if holds {
				return []sessState{encodeSess(open, freed)}
			}
			return nil
		case out.Result == sessOK:
			if holds && k.Token == in.Token {
				return nil
			}
			return same
		default:
			if holds {
				return []sessState{st, encodeSess(open, freed)}
			}
			return same
		}
	case sessClose:
		_, live := open[in.Session]
		closed := maps.Clone(open)
		delete(closed, in.Session)
		freed := maps.Clone(keys)
		for key, k := range freed {
			if k.Session == in.Session {
				freed[key] = sessKey{Max: k.Max}
			}
		}
		switch out.Result {
		case sessOK:
			if live {
				return []sessState{encodeSess(closed, freed)}
			}
			return nil
		case sessGone:
			if !live {
				return same
			}
			return nil
		default:
			if live {
				return []sessState{st, encodeSess(closed, freed)}
			}
			return same
		}
	}
	return nil
}

// sessModel is the porcupine model of sessions.
var sessModel = porcupine.NondeterministicModel{
	Init: func() []interface{} { return []interface{}{sessState{}} },
	Step: func(state, input, output interface{}) []interface{} {
		next := sessStep(state.(sessState), input.(sessInput), output.(sessOutput))
		out := make([]interface{}, len(next))
		for i, s := range next {
			out[i] = s
		}
		return out
	},
	DescribeOperation: func(input, output interface{}) string {
		return sessOp{Input: input.(sessInput), Output: output.(sessOutput)}.String()
	},
	DescribeState: func(state interface{}) string {
		s := state.(sessState)
		return "open " + s.open + "; keys " + s.keys
	},
}

// checkSessions checks one history against sessModel; an unknown
// outcome returns at infinity.
func checkSessions(ops []sessOp, timeout time.Duration) (porcupine.CheckResult, int) {
	var end time.Duration
	for _, o := range ops {
		end = max(end, o.Call, o.Return)
	}
	infinity := int64(end) + int64(time.Hour)
	hist := make([]porcupine.Operation, 0, len(ops))
	for _, o := range ops {
		r := int64(o.Return)
		if o.Output.Result == sessUnknown {
			r = infinity
		}
		hist = append(hist, porcupine.Operation{ClientId: o.Client, Input: o.Input, Call: int64(o.Call), Output: o.Output, Return: r})
	}
	return porcupine.CheckOperationsTimeout(sessModel.ToModel(), hist, timeout), len(hist)
}

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
	rec := func(in sessInput, call time.Duration, out sessOutput) {
		p.sess[epoch] = append(p.sess[epoch], sessOp{Client: a.i, Input: in, Output: out, Call: call, Return: since()})
	}
	result := func(op string, err error) sessResult {
		switch {
		case err == nil:
			return sessOK
		case errors.Is(err, client.ErrHeld):
			return sessRefused
		case errors.Is(err, client.ErrNoSession):
			return sessGone
		}
		a.outcome(op, err, nil)
		return sessUnknown
	}
	if ps.id == 0 {
		ps.gen++
		holder := fmt.Sprintf("ps-%d-%d", epoch, ps.gen)
		in := sessInput{Kind: sessOpen, Holder: holder}
		call := since()
		info, err := a.c.OpenSession(ctx, holder, proberTTL)
		res := result("session open", err)
		rec(in, call, sessOutput{Result: res, Session: info.ID})
		if res == sessOK {
			ps.id, ps.holder = info.ID, holder
			return true
		}
		return res != sessUnknown
	}
	in := sessInput{Session: ps.id, Holder: ps.holder}
	call := since()
	switch r := a.rnd.IntN(10); {
	case r < 5:
		in.Kind, in.Key = sessAcquire, keys[a.rnd.IntN(2)]
		lk, err := a.c.GrantWith(ctx, in.Key, ps.holder, 0, 0, client.GrantOptions{Session: ps.id})
		res := result("session acquire", err)
		rec(in, call, sessOutput{Result: res, Token: lk.Token})
		if res == sessOK {
			ps.held[in.Key] = lk.Token
		}
		if res == sessUnknown {
			ps.id = 0 // never used again
			return false
		}
	case r < 8:
		key := keys[a.rnd.IntN(2)]
		tok, ok := ps.held[key]
		if !ok {
			return true
		}
		in.Kind, in.Key, in.Token = sessRelease, key, tok
		released, err := a.c.Release(ctx, key, ps.holder, tok)
		res := result("session release", err)
		rec(in, call, sessOutput{Result: res, Released: released})
		delete(ps.held, key)
		if res == sessUnknown {
			ps.id = 0
			return false
		}
	default:
		in.Kind = sessClose
		_, err := a.c.CloseSession(ctx, ps.id, ps.holder)
		res := result("session close", err)
		rec(in, call, sessOutput{Result: res})
		ps.id, ps.held = 0, map[string]uint64{}
		return res != sessUnknown
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
