package e2e

import (
	"testing"

	"github.com/anishathalye/porcupine"
)

type mh struct{ ops []MultiOp }

func (h *mh) acq(client int, keys, holder string, call, ret int, out MultiOutput) *mh {
	h.ops = append(h.ops, MultiOp{Client: client, Input: MultiInput{Kind: MultiAcquire, Keys: keys, Holder: holder}, Output: out, Call: ms(call), Return: ms(ret)})
	return h
}

func (h *mh) rel(client int, key, holder string, token uint64, call, ret int, out MultiOutput) *mh {
	h.ops = append(h.ops, MultiOp{Client: client, Input: MultiInput{Kind: MultiRelease, Keys: key, Holder: holder, Token: token}, Output: out, Call: ms(call), Return: ms(ret)})
	return h
}

func tokens(s string) MultiOutput  { return MultiOutput{Result: OK, Tokens: s} }
func mRefused() MultiOutput        { return MultiOutput{Result: Refused} }
func mUnknown() MultiOutput        { return MultiOutput{} }
func mReleased(b bool) MultiOutput { return MultiOutput{Result: OK, Released: b} }

func TestMultiModel(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    *mh
		want porcupine.CheckResult
	}{
		{"an overlap refused, then granted after a release", new(mh).
			acq(0, "m1,m2", "a", 0, 1, tokens("1,2")).
			acq(1, "m2,m3", "b", 2, 3, mRefused()).
			rel(0, "m2", "a", 2, 4, 5, mReleased(true)).
			acq(1, "m2,m3", "b", 6, 7, tokens("3,4")), porcupine.Ok},
		{"an unknown acquire may hold every key or none", new(mh).
			acq(0, "m1,m3", "a", 0, 1, mUnknown()).
			acq(1, "m3", "b", 2, 3, mRefused()), porcupine.Ok},
		{"a renewal by the same holder", new(mh).
			acq(0, "m1,m2", "a", 0, 1, tokens("1,2")).
			acq(0, "m2,m3", "a", 2, 3, tokens("3,4")), porcupine.Ok},
		{"two holders of one key", new(mh).
			acq(0, "m1,m2", "a", 0, 1, tokens("1,2")).
			acq(1, "m2,m3", "b", 2, 3, tokens("3,4")), porcupine.Illegal},
		{"half granted: one key taken, the other refused", new(mh).
			acq(0, "m1", "a", 0, 1, tokens("1")).
			acq(1, "m2,m3", "b", 2, 3, tokens("2,3")).
			acq(2, "m1,m2", "c", 4, 5, tokens("4,5")), porcupine.Illegal},
		{"refused while every key was free", new(mh).
			acq(0, "m1,m2", "a", 0, 1, mRefused()), porcupine.Illegal},
		{"a token going backwards on a key", new(mh).
			acq(0, "m1,m2", "a", 0, 1, tokens("5,6")).
			rel(0, "m1", "a", 5, 2, 3, mReleased(true)).
			acq(1, "m1", "b", 4, 5, tokens("4")), porcupine.Illegal},
		{"a release refused while its grant is live", new(mh).
			acq(0, "m1,m2", "a", 0, 1, tokens("1,2")).
			rel(0, "m1", "a", 1, 2, 3, mReleased(false)), porcupine.Illegal},
	} {
		res, _ := CheckMultiLinearizable(tc.h.ops, 0)
		if res != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, res, tc.want)
		}
	}
}
