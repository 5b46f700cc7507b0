package e2e

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// The porcupine model of a semaphore and of a read/write lock, for
// histories of try-once acquires and releases on keys whose leases do not
// expire within the run.
//
// A semaphore key of N permits holds at most N holders at once; a
// read/write key holds readers, or one writer and nothing else. A grant
// takes a token larger than any the key has carried (the global counter
// seen from one key). An acquire is refused only when its kind could not
// be granted: the permits are all taken, a reader meets a writer, a
// writer meets any hold. A release by (holder, token) is answered true
// only while that hold is live, false only while it is not. An Unknown
// acquire may or may not have taken effect, with a token nobody has
// seen; an Unknown release may or may not have.

// SharedKind is a shared-lock operation.
type SharedKind uint8

const (
	SharedAcquire SharedKind = iota // try once
	SharedRelease
)

// SharedInput is one call on a semaphore or a read/write lock.
type SharedInput struct {
	Kind    SharedKind
	Key     string
	Holder  string
	Permits int    // acquire of a semaphore permit: the semaphore's size
	Write   bool   // acquire of a read/write lock: the writer's side
	Token   uint64 // release
}

// SharedOutput is how it ended: Result, the granted Token, or for a
// release whether it Released.
type SharedOutput struct {
	Result   Result
	Token    uint64
	Released bool
}

// SharedOp is one recorded call.
type SharedOp struct {
	Client       int
	Input        SharedInput
	Output       SharedOutput
	Call, Return time.Duration
}

// maxSharedHolds bounds the holds a state carries; a history that would
// need more is reported as not linearizable rather than silently cut.
const maxSharedHolds = 8

type sharedHold struct {
	Holder string
	Token  uint64 // 0: granted by an Unknown acquire, not yet seen
	Write  bool
}

// sharedState is one key: its holds sorted by holder (so that equal
// states compare equal) and the largest token seen on it.
type sharedState struct {
	N     int
	Holds [maxSharedHolds]sharedHold
	Max   uint64
}

func (s sharedState) holding(holder string) int {
	for i := range s.N {
		if s.Holds[i].Holder == holder {
			return i
		}
	}
	return -1
}

func (s sharedState) writers() int {
	n := 0
	for i := range s.N {
		if s.Holds[i].Write {
			n++
		}
	}
	return n
}

// grantable reports whether in could be granted in s.
func (s sharedState) grantable(in SharedInput) bool {
	if s.holding(in.Holder) >= 0 || s.N == maxSharedHolds {
		return false
	}
	switch {
	case in.Permits > 0:
		return s.N < in.Permits
	case in.Write:
		return s.N == 0
	default:
		return s.writers() == 0
	}
}

func (s sharedState) with(h sharedHold) sharedState {
	s.Holds[s.N] = h
	s.N++
	sort.Slice(s.Holds[:s.N], func(i, j int) bool { return s.Holds[i].Holder < s.Holds[j].Holder })
	return s
}

func (s sharedState) without(i int) sharedState {
	copy(s.Holds[i:s.N], s.Holds[i+1:s.N])
	s.N--
	s.Holds[s.N] = sharedHold{}
	return s
}

func sharedStep(s sharedState, in SharedInput, out SharedOutput) []sharedState {
	switch in.Kind {
	case SharedAcquire:
		switch out.Result {
		case OK:
			if s.grantable(in) && out.Token > s.Max {
				n := s.with(sharedHold{Holder: in.Holder, Token: out.Token, Write: in.Write})
				n.Max = out.Token
				return []sharedState{n}
			}
			return nil
		case Refused:
			if !s.grantable(in) && s.N < maxSharedHolds {
				return []sharedState{s}
			}
			return nil
		default:
			if s.grantable(in) {
				return []sharedState{s, s.with(sharedHold{Holder: in.Holder, Write: in.Write})}
			}
			return []sharedState{s}
		}
	case SharedRelease:
		i := s.holding(in.Holder)
		live := i >= 0 && (s.Holds[i].Token == in.Token || (s.Holds[i].Token == 0 && in.Token > s.Max))
		switch {
		case out.Result == OK && out.Released:
			if live {
				n := s.without(i)
				n.Max = max(n.Max, in.Token)
				return []sharedState{n}
			}
			return nil
		case out.Result == OK:
			if i >= 0 && s.Holds[i].Token == in.Token {
				return nil // certainly live: refusing it is wrong
			}
			return []sharedState{s}
		default:
			if live {
				n := s.without(i)
				n.Max = max(n.Max, in.Token)
				return []sharedState{s, n}
			}
			return []sharedState{s}
		}
	}
	return nil
}

func (o SharedOp) String() string {
	in := o.Input
	what := "read"
	switch {
	case in.Permits > 0:
		what = fmt.Sprintf("permit of %d", in.Permits)
	case in.Write:
		what = "write"
	}
	res := map[Result]string{Unknown: "unknown", OK: "ok", Refused: "refused"}[o.Output.Result]
	if in.Kind == SharedRelease {
		return fmt.Sprintf("release %s %s token %d: %s released=%v", in.Key, in.Holder, in.Token, res, o.Output.Released)
	}
	return fmt.Sprintf("acquire %s (%s) %s: %s token %d", in.Key, what, in.Holder, res, o.Output.Token)
}

// SharedModel is the porcupine model of semaphores and read/write locks,
// partitioned by key.
var SharedModel = porcupine.NondeterministicModel{
	Partition: partitionBy(func(in interface{}) string { return in.(SharedInput).Key }),
	Init:      func() []interface{} { return []interface{}{sharedState{}} },
	Step: func(state, input, output interface{}) []interface{} {
		next := sharedStep(state.(sharedState), input.(SharedInput), output.(SharedOutput))
		out := make([]interface{}, len(next))
		for i, s := range next {
			out[i] = s
		}
		return out
	},
	DescribeOperation: func(input, output interface{}) string {
		return SharedOp{Input: input.(SharedInput), Output: output.(SharedOutput)}.String()
	},
	DescribeState: func(state interface{}) string {
		s := state.(sharedState)
		var hs []string
		for _, h := range s.Holds[:s.N] {
			tok := fmt.Sprint(h.Token)
			if h.Token == 0 {
				tok = "?"
			}
			w := ""
			if h.Write {
				w = "w"
			}
			hs = append(hs, h.Holder+"/"+tok+w)
		}
		return fmt.Sprintf("[%s] (max %d)", strings.Join(hs, " "), s.Max)
	},
}

func (o SharedOp) record() (int, interface{}, interface{}, time.Duration, time.Duration) {
	return o.Client, o.Input, o.Output, o.Call, o.Return
}
func (o SharedOp) unknown() bool { return o.Output.Result == Unknown }
func (o SharedOp) grant() bool   { return o.Input.Kind == SharedAcquire && o.Output.Result == OK }

// CheckSharedLinearizable checks ops against SharedModel. An Unknown
// outcome returns at infinity. timeout bounds the search (0: none).
func CheckSharedLinearizable(ops []SharedOp, timeout time.Duration) (porcupine.CheckResult, int) {
	return checkCalls(SharedModel, ops, timeout)
}

// recorded is one call of a history checked against a model of its own.
type recorded interface {
	record() (client int, input, output interface{}, call, ret time.Duration)
	unknown() bool // no definite answer: it may or may not have taken effect
	grant() bool   // a grant, to count how much a history checked
	String() string
}

// checkCalls checks ops against model; an Unknown outcome returns at
// infinity. timeout bounds the search (0: none).
func checkCalls[R recorded](model porcupine.NondeterministicModel, ops []R, timeout time.Duration) (porcupine.CheckResult, int) {
	var end time.Duration
	for _, o := range ops {
		_, _, _, call, ret := o.record()
		end = max(end, ret, call)
	}
	infinity := int64(end) + int64(time.Hour)
	hist := make([]porcupine.Operation, 0, len(ops))
	for _, o := range ops {
		client, in, out, call, ret := o.record()
		r := int64(ret)
		if o.unknown() {
			r = infinity
		}
		hist = append(hist, porcupine.Operation{ClientId: client, Input: in, Call: int64(call), Output: out, Return: r})
	}
	return porcupine.CheckOperationsTimeout(model.ToModel(), hist, timeout), len(hist)
}

// partitionBy partitions a history by the key of each input.
func partitionBy(key func(input interface{}) string) func([]porcupine.Operation) [][]porcupine.Operation {
	return func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := key(op.Input)
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		sort.Strings(keys)
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	}
}
