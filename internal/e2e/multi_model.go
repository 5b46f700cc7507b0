package e2e

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// The porcupine model of multi-key acquires: a few exclusive keys, each
// free or held by one holder, taken all together or not at all. An
// acquire of several keys is granted only if every key is free or already
// its holder's (a renewal), each with a token larger than any that key
// has carried; it is refused only if some key is another holder's. A
// release of one key by (holder, token) as in the plain lock's model. The
// keys never expire within a run. One partition: an operation spans keys.

// MultiKind is a multi-key operation.
type MultiKind uint8

const (
	MultiAcquire MultiKind = iota // all of Keys, try once
	MultiRelease                  // one key
)

// MultiInput is one call.
type MultiInput struct {
	Kind   MultiKind
	Keys   string // acquire: the keys, comma-separated; release: the one key
	Holder string
	Token  uint64 // release
}

// MultiOutput is how it ended: Result, the tokens of an acquire
// (comma-separated, in the order of Keys), or a release's answer.
type MultiOutput struct {
	Result   Result
	Tokens   string
	Released bool
}

// MultiOp is one recorded call.
type MultiOp struct {
	Client       int
	Input        MultiInput
	Output       MultiOutput
	Call, Return time.Duration
}

// MultiKeys are the keys the model knows, in order.
var MultiKeys = []string{"m1", "m2", "m3"}

type multiHold struct {
	Holder string // "" while free
	Token  uint64 // 0: granted by an Unknown acquire, not yet seen
	Max    uint64
}

type multiState [3]multiHold

func multiIndex(key string) int { return slices.Index(MultiKeys, key) }

func multiStep(s multiState, in MultiInput, out MultiOutput) []multiState {
	switch in.Kind {
	case MultiAcquire:
		keys := strings.Split(in.Keys, ",")
		grantable, refusable := true, false
		for _, k := range keys {
			i := multiIndex(k)
			if i < 0 {
				return nil
			}
			if h := s[i].Holder; h != "" && h != in.Holder {
				grantable, refusable = false, true
			}
		}
		switch out.Result {
		case OK:
			toks := strings.Split(out.Tokens, ",")
			if !grantable || len(toks) != len(keys) {
				return nil
			}
			n := s
			for j, k := range keys {
				var tok uint64
				if _, err := fmt.Sscan(toks[j], &tok); err != nil {
					return nil
				}
				i := multiIndex(k)
				if tok <= n[i].Max {
					return nil
				}
				n[i] = multiHold{Holder: in.Holder, Token: tok, Max: tok}
			}
			return []multiState{n}
		case Refused:
			if refusable {
				return []multiState{s}
			}
			return nil
		default:
			if !grantable {
				return []multiState{s}
			}
			n := s
			for _, k := range keys {
				i := multiIndex(k)
				n[i] = multiHold{Holder: in.Holder, Max: n[i].Max}
			}
			return []multiState{s, n}
		}
	case MultiRelease:
		i := multiIndex(in.Keys)
		if i < 0 {
			return nil
		}
		h := s[i]
		live := h.Holder == in.Holder && (h.Token == in.Token || (h.Token == 0 && in.Token > h.Max))
		freed := s
		freed[i] = multiHold{Max: max(h.Max, in.Token)}
		switch {
		case out.Result == OK && out.Released:
			if live {
				return []multiState{freed}
			}
			return nil
		case out.Result == OK:
			if h.Holder == in.Holder && h.Token == in.Token {
				return nil
			}
			return []multiState{s}
		default:
			if live {
				return []multiState{s, freed}
			}
			return []multiState{s}
		}
	}
	return nil
}

func (o MultiOp) String() string {
	res := map[Result]string{Unknown: "unknown", OK: "ok", Refused: "refused"}[o.Output.Result]
	if o.Input.Kind == MultiRelease {
		return fmt.Sprintf("release %s %s token %d: %s released=%v", o.Input.Keys, o.Input.Holder, o.Input.Token, res, o.Output.Released)
	}
	return fmt.Sprintf("acquire-all %s %s: %s tokens %s", o.Input.Keys, o.Input.Holder, res, o.Output.Tokens)
}

// MultiModel is the porcupine model of multi-key acquires on MultiKeys.
var MultiModel = porcupine.NondeterministicModel{
	Init: func() []interface{} { return []interface{}{multiState{}} },
	Step: func(state, input, output interface{}) []interface{} {
		next := multiStep(state.(multiState), input.(MultiInput), output.(MultiOutput))
		out := make([]interface{}, len(next))
		for i, s := range next {
			out[i] = s
		}
		return out
	},
	DescribeOperation: func(input, output interface{}) string {
		return MultiOp{Input: input.(MultiInput), Output: output.(MultiOutput)}.String()
	},
	DescribeState: func(state interface{}) string {
		s := state.(multiState)
		var parts []string
		for i, h := range s {
			switch {
			case h.Holder == "":
				parts = append(parts, fmt.Sprintf("%s free (max %d)", MultiKeys[i], h.Max))
			case h.Token == 0:
				parts = append(parts, fmt.Sprintf("%s %s/?", MultiKeys[i], h.Holder))
			default:
				parts = append(parts, fmt.Sprintf("%s %s/%d", MultiKeys[i], h.Holder, h.Token))
			}
		}
		return strings.Join(parts, ", ")
	},
}

func (o MultiOp) record() (int, interface{}, interface{}, time.Duration, time.Duration) {
	return o.Client, o.Input, o.Output, o.Call, o.Return
}
func (o MultiOp) unknown() bool { return o.Output.Result == Unknown }
func (o MultiOp) grant() bool   { return o.Input.Kind == MultiAcquire && o.Output.Result == OK }

// CheckMultiLinearizable checks ops against MultiModel. An Unknown
// outcome returns at infinity. timeout bounds the search (0: none).
func CheckMultiLinearizable(ops []MultiOp, timeout time.Duration) (porcupine.CheckResult, int) {
	return checkCalls(MultiModel, ops, timeout)
}
