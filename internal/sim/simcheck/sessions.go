package simcheck

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// The porcupine model of sessions, which checks the prober's session
// calls (internal/sim): a session is opened for a holder (the server names it), locks
// are taken under it (try-once) and released, and it is closed, which
// releases every lock under it. A lock under a session is granted when
// the key is free or already the session's (a renewal: a new token),
// with a token above any the key has carried; refused when another
// session holds the key; answered no_session (gone) when the session is
// closed. The sessions' TTL outlasts any world, so nothing expires; each
// epoch's keys are a history of their own.

// SessionKind is a session call.
type SessionKind uint8

const (
	SessionOpen SessionKind = iota
	SessionAcquire
	SessionRelease
	SessionClose
)

// SessionResult is how a session call ended.
type SessionResult uint8

const (
	SessionUnknown SessionResult = iota // no answer: it may or may not have happened
	SessionOK
	SessionRefused // held by another session
	SessionGone    // no such session (closed)
)

// SessionInput is one call: Session is the server's id of the session (an
// open's is in its output), Key and Token a lock's.
type SessionInput struct {
	Kind    SessionKind
	Holder  string
	Session uint64
	Key     string
	Token   uint64
}

// SessionOutput is its answer: an open's session id, an acquire's token, a
// release's released.
type SessionOutput struct {
	Result   SessionResult
	Session  uint64
	Token    uint64
	Released bool
}

// SessionOp is one recorded call.
type SessionOp struct {
	Client       int
	Input        SessionInput
	Output       SessionOutput
	Call, Return time.Duration
}

func (o SessionOp) String() string {
	res := map[SessionResult]string{SessionUnknown: "unknown", SessionOK: "ok", SessionRefused: "refused", SessionGone: "gone"}[o.Output.Result]
	in := o.Input
	switch in.Kind {
	case SessionOpen:
		return fmt.Sprintf("open %s: %s session %d", in.Holder, res, o.Output.Session)
	case SessionAcquire:
		return fmt.Sprintf("acquire %s under %d (%s): %s token %d", in.Key, in.Session, in.Holder, res, o.Output.Token)
	case SessionRelease:
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

func sessStep(st sessState, in SessionInput, out SessionOutput) []sessState {
	open, keys := decodeSess(st)
	same := []sessState{st}
	switch in.Kind {
	case SessionOpen:
		switch out.Result {
		case SessionOK:
			if _, dup := open[out.Session]; dup || out.Session == 0 {
				return nil
			}
			open[out.Session] = in.Holder
			return []sessState{encodeSess(open, keys)}
		case SessionUnknown:
			return same // its session, if any, is never used
		}
		return nil
	case SessionAcquire:
		k := keys[in.Key]
		_, live := open[in.Session]
		grantable := live && (k.Session == 0 || k.Session == in.Session)
		switch out.Result {
		case SessionOK:
			if !grantable || out.Token <= k.Max {
				return nil
			}
			keys[in.Key] = sessKey{Session: in.Session, Token: out.Token, Max: out.Token}
			return []sessState{encodeSess(open, keys)}
		case SessionRefused:
			if live && !grantable {
				return same
			}
			return nil
		case SessionGone:
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
	case SessionRelease:
		k := keys[in.Key]
		holds := k.Session != 0 && open[k.Session] == in.Holder && (k.Token == in.Token || k.Token == 0 && in.Token > k.Max)
		freed := maps.Clone(keys)
		freed[in.Key] = sessKey{Max: max(k.Max, in.Token)}
		switch {
		case out.Result == SessionOK && out.Released:
			if holds {
				return []sessState{encodeSess(open, freed)}
			}
			return nil
		case out.Result == SessionOK:
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
	case SessionClose:
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
		case SessionOK:
			if live {
				return []sessState{encodeSess(closed, freed)}
			}
			return nil
		case SessionGone:
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
		next := sessStep(state.(sessState), input.(SessionInput), output.(SessionOutput))
		out := make([]interface{}, len(next))
		for i, s := range next {
			out[i] = s
		}
		return out
	},
	DescribeOperation: func(input, output interface{}) string {
		return SessionOp{Input: input.(SessionInput), Output: output.(SessionOutput)}.String()
	},
	DescribeState: func(state interface{}) string {
		s := state.(sessState)
		return "open " + s.open + "; keys " + s.keys
	},
}

// checkSessions checks one history against sessModel; an unknown
// outcome returns at infinity.
func checkSessions(ops []SessionOp, timeout time.Duration) (porcupine.CheckResult, int) {
	var end time.Duration
	for _, o := range ops {
		end = max(end, o.Call, o.Return)
	}
	infinity := int64(end) + int64(time.Hour)
	hist := make([]porcupine.Operation, 0, len(ops))
	for _, o := range ops {
		r := int64(o.Return)
		if o.Output.Result == SessionUnknown {
			r = infinity
		}
		hist = append(hist, porcupine.Operation{ClientId: o.Client, Input: o.Input, Call: int64(o.Call), Output: o.Output, Return: r})
	}
	return porcupine.CheckOperationsTimeout(sessModel.ToModel(), hist, timeout), len(hist)
}
