package e2e

import (
	"fmt"
	"math"
	"time"

	"github.com/anishathalye/porcupine"
)

// keyState is one key of the lock table as the model sees it.
type keyState struct {
	Holder string // "" while the key is free
	Token  uint64 // the live grant's token, when Known
	// Known is false for a grant whose token nobody has seen yet (an
	// Unknown or phantom grant); an answer that names it makes it known.
	Known bool
	// Phantom marks a grant the server may release by itself: a waiting
	// acquire whose waiter went away.
	Phantom bool
	// Max is the largest token known to have been issued on the key; a
	// grant takes a larger one (the global counter seen from one key).
	Max uint64
}

// live reports whether (holder, token) could be the live grant, and the
// state with the token made known if it was not.
func (s keyState) live(holder string, token uint64) (bool, keyState) {
	if s.Holder == "" || (holder != "" && s.Holder != holder) {
		return false, s
	}
	if s.Known {
		return s.Token == token, s
	}
	if token <= s.Max {
		return false, s
	}
	s.Token, s.Known, s.Max = token, true, token
	return true, s
}

func (s keyState) grantable(holder string) bool { return s.Holder == "" || s.Holder == holder }

// step is the lock table's specification for one key: every state the
// table may be in after in answered out in state s (none: impossible).
func step(s keyState, in Input, out Output) []keyState {
	switch in.Kind {
	case Acquire, Wait:
		switch out.Result {
		case OK:
			if s.grantable(in.Holder) && out.Token > s.Max {
				return []keyState{{Holder: in.Holder, Token: out.Token, Known: true, Max: out.Token}}
			}
			return nil
		case Refused:
			if !s.grantable(in.Holder) {
				return []keyState{s}
			}
			return nil
		default:
			if s.grantable(in.Holder) {
				// A wait whose waiter went away may be released by the server.
				return []keyState{s, {Holder: in.Holder, Max: s.Max, Phantom: in.Kind == Wait}}
			}
			return []keyState{s}
		}
	case PhantomGrant:
		// in.Token is the token its wait was answered (0: none): while that
		// grant is live, the earlier copy cannot come after it.
		if s.grantable(in.Holder) && !(in.Token != 0 && s.Known && s.Holder == in.Holder && s.Token == in.Token) {
			return []keyState{s, {Holder: in.Holder, Max: s.Max, Phantom: true}}
		}
		return []keyState{s}
	case PhantomRelease:
		if s.Holder == in.Holder && s.Phantom {
			return []keyState{s, {Max: s.Max}}
		}
		return []keyState{s}
	case Extend:
		switch out.Result {
		case OK:
			if ok, n := s.live(in.Holder, in.Token); ok {
				n.Phantom = false // its holder is using it
				return []keyState{n}
			}
			return nil
		case Refused:
			if s.Known && s.Holder == in.Holder && s.Token == in.Token {
				return nil
			}
			return []keyState{s}
		default:
			return []keyState{s}
		}
	case Release:
		match := func(s keyState) (bool, keyState) {
			if in.Token == 0 {
				return s.Holder != "" && s.Holder == in.Holder, s
			}
			return s.live(in.Holder, in.Token)
		}
		switch out.Result {
		case OK:
			if out.Bool {
				if ok, _ := match(s); ok {
					return []keyState{{Max: max(s.Max, in.Token)}}
				}
				return nil
			}
			// Refusing is right unless the release certainly matches.
			if s.Holder == in.Holder && s.Holder != "" && (in.Token == 0 || (s.Known && s.Token == in.Token)) {
				return nil
			}
			return []keyState{s}
		default:
			if ok, _ := match(s); ok {
				return []keyState{s, {Max: max(s.Max, in.Token)}}
			}
			return []keyState{s}
		}
	case Check:
		if out.Result != OK {
			return []keyState{s}
		}
		if out.Bool {
			if ok, n := s.live("", in.Token); ok {
				return []keyState{n}
			}
			return nil
		}
		if s.Holder != "" && s.Known && s.Token == in.Token {
			return nil
		}
		return []keyState{s}
	case Get:
		switch out.Result {
		case OK:
			if ok, n := s.live(out.Holder, out.Token); ok && out.Holder != "" {
				return []keyState{n}
			}
			return nil
		case Refused:
			if s.Holder == "" {
				return []keyState{s}
			}
			return nil
		default:
			return []keyState{s}
		}
	}
	return nil
}

// Model is the porcupine model of the lock table, partitioned by key.
var Model = porcupine.NondeterministicModel{
	Partition: partitionByKey,
	Init:      func() []interface{} { return []interface{}{keyState{}} },
	Step: func(state, input, output interface{}) []interface{} {
		next := step(state.(keyState), input.(Input), output.(Output))
		out := make([]interface{}, len(next))
		for i, s := range next {
			out[i] = s
		}
		return out
	},
	DescribeOperation: func(input, output interface{}) string {
		return Op{Input: input.(Input), Output: output.(Output)}.String()
	},
	DescribeState: func(state interface{}) string {
		s := state.(keyState)
		if s.Holder == "" {
			return fmt.Sprintf("free (max %d)", s.Max)
		}
		tok := fmt.Sprint(s.Token)
		if !s.Known {
			tok = fmt.Sprintf(">%d?", s.Max)
		}
		return fmt.Sprintf("%s/%s", s.Holder, tok)
	},
}

var partitionByKey = partitionBy(func(in interface{}) string { return in.(Input).Key })

// Linearizability is the verdict of CheckLinearizable.
type Linearizability struct {
	Result porcupine.CheckResult // Ok, Illegal, or Unknown (timed out)
	Ops    int                   // operations checked
	Info   porcupine.LinearizationInfo
	model  porcupine.Model
}

// Visualize writes porcupine's HTML view of the history (the longest
// linearizable prefix of each key and where it stops) to path.
func (l Linearizability) Visualize(path string) error {
	return porcupine.VisualizePath(l.model, l.Info, path)
}

// CheckLinearizable checks the operations on keys that do not expire
// within the run against Model. An Unknown outcome returns at infinity;
// Unknown reads are dropped (they change nothing). timeout bounds the
// search (0: none); a search that ran out of time is Unknown, not Ok.
func CheckLinearizable(ops []Op, timeout time.Duration) Linearizability {
	var end time.Duration
	for _, o := range ops {
		end = max(end, o.Return, o.Call)
	}
	// Far past every real timestamp, and far from overflowing.
	infinity := int64(end) + int64(time.Hour)
	if infinity > math.MaxInt64/2 {
		infinity = math.MaxInt64 / 2
	}
	var hist []porcupine.Operation
	for _, o := range ops {
		if o.Input.Expires {
			continue
		}
		ret := int64(o.Return)
		if o.Output.Result == Unknown {
			if o.Input.Kind == Check || o.Input.Kind == Get {
				continue
			}
			ret = infinity
		}
		hist = append(hist, porcupine.Operation{ClientId: o.Client, Input: o.Input, Call: int64(o.Call), Output: o.Output, Return: ret})
	}
	m := Model.ToModel()
	res, info := porcupine.CheckOperationsVerbose(m, hist, timeout)
	return Linearizability{Result: res, Ops: len(hist), Info: info, model: m}
}
