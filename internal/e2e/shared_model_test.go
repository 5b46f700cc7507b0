package e2e

import (
	"testing"

	"github.com/anishathalye/porcupine"
)

// sh builds shared-lock histories: each op is call..ret on its client.
type sh struct{ ops []SharedOp }

func (h *sh) acq(client int, key, holder string, permits int, write bool, call, ret int, out SharedOutput) *sh {
	h.ops = append(h.ops, SharedOp{Client: client, Input: SharedInput{Kind: SharedAcquire, Key: key, Holder: holder, Permits: permits, Write: write},
		Output: out, Call: ms(call), Return: ms(ret)})
	return h
}

func (h *sh) rel(client int, key, holder string, token uint64, call, ret int, out SharedOutput) *sh {
	h.ops = append(h.ops, SharedOp{Client: client, Input: SharedInput{Kind: SharedRelease, Key: key, Holder: holder, Token: token},
		Output: out, Call: ms(call), Return: ms(ret)})
	return h
}

func got(tok uint64) SharedOutput  { return SharedOutput{Result: OK, Token: tok} }
func no() SharedOutput             { return SharedOutput{Result: Refused} }
func lost() SharedOutput           { return SharedOutput{} }
func released(b bool) SharedOutput { return SharedOutput{Result: OK, Released: b} }

func TestSharedModel(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    *sh
		want porcupine.CheckResult
	}{
		{"two permits, a third refused, freed by a release", new(sh).
			acq(0, "s", "a", 2, false, 0, 1, got(1)).
			acq(1, "s", "b", 2, false, 2, 3, got(2)).
			acq(2, "s", "c", 2, false, 4, 5, no()).
			rel(0, "s", "a", 1, 6, 7, released(true)).
			acq(2, "s", "c", 2, false, 8, 9, got(3)), porcupine.Ok},
		{"readers together, a writer refused, then alone", new(sh).
			acq(0, "rw", "r1", 0, false, 0, 1, got(1)).
			acq(1, "rw", "r2", 0, false, 0, 2, got(2)).
			acq(2, "rw", "w", 0, true, 3, 4, no()).
			rel(0, "rw", "r1", 1, 5, 6, released(true)).
			rel(1, "rw", "r2", 2, 5, 6, released(true)).
			acq(2, "rw", "w", 0, true, 7, 8, got(3)).
			acq(0, "rw", "r1", 0, false, 9, 10, no()), porcupine.Ok},
		{"an unknown acquire may hold a permit", new(sh).
			acq(0, "s", "a", 1, false, 0, 1, lost()).
			acq(1, "s", "b", 1, false, 2, 3, no()), porcupine.Ok},
		{"an unknown release may or may not", new(sh).
			acq(0, "s", "a", 1, false, 0, 1, got(4)).
			rel(0, "s", "a", 4, 2, 3, lost()).
			acq(1, "s", "b", 1, false, 4, 5, got(5)), porcupine.Ok},
		{"three permits of two at once", new(sh).
			acq(0, "s", "a", 2, false, 0, 1, got(1)).
			acq(1, "s", "b", 2, false, 2, 3, got(2)).
			acq(2, "s", "c", 2, false, 4, 5, got(3)), porcupine.Illegal},
		{"a writer beside a reader", new(sh).
			acq(0, "rw", "r", 0, false, 0, 1, got(1)).
			acq(1, "rw", "w", 0, true, 2, 3, got(2)), porcupine.Illegal},
		{"a reader beside a writer", new(sh).
			acq(0, "rw", "w", 0, true, 0, 1, got(1)).
			acq(1, "rw", "r", 0, false, 2, 3, got(2)), porcupine.Illegal},
		{"a token going backwards", new(sh).
			acq(0, "s", "a", 2, false, 0, 1, got(5)).
			rel(0, "s", "a", 5, 2, 3, released(true)).
			acq(1, "s", "b", 2, false, 4, 5, got(3)), porcupine.Illegal},
		{"refused while a permit was free", new(sh).
			acq(0, "s", "a", 2, false, 0, 1, got(1)).
			acq(1, "s", "b", 2, false, 2, 3, no()), porcupine.Illegal},
		{"a release of a hold that is not there", new(sh).
			acq(0, "s", "a", 2, false, 0, 1, got(1)).
			rel(1, "s", "b", 1, 2, 3, released(true)), porcupine.Illegal},
		{"a release refused while its hold is live", new(sh).
			acq(0, "s", "a", 2, false, 0, 1, got(1)).
			rel(0, "s", "a", 1, 2, 3, released(false)), porcupine.Illegal},
	} {
		res, _ := CheckSharedLinearizable(tc.h.ops, 0)
		if res != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, res, tc.want)
		}
	}
}
