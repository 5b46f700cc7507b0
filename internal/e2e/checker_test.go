package e2e

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// Hand-made histories: the checkers must accept the legal ones (including
// the ambiguity that faults create) and REPORT each planted violation.

type hb struct{ ops []Op }

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// add appends an operation invoked at call ms and answered at ret ms.
func (h *hb) add(client int, in Input, call, ret int, out Output) *hb {
	if in.TTL == 0 {
		in.TTL = time.Minute
	}
	h.ops = append(h.ops, Op{ID: len(h.ops), Client: client, Input: in, Output: out, Call: ms(call), Return: ms(ret)})
	return h
}

// wait appends a waiting acquire with its phantoms, as Recorder.Wait does.
func (h *hb) wait(client int, key, holder string, call, ret int, out Output) *hb {
	h.add(client, Input{Kind: Wait, Key: key, Holder: holder}, call, ret, out)
	var tok uint64
	if out.Result == OK {
		tok = out.Token
	}
	h.add(client, Input{Kind: PhantomGrant, Key: key, Holder: holder, Token: tok}, call, ret, Output{})
	return h.add(client, Input{Kind: PhantomRelease, Key: key, Holder: holder, Token: tok}, call, ret, Output{})
}

func acq(key, holder string) Input { return Input{Kind: Acquire, Key: key, Holder: holder} }
func rel(key, holder string, tok uint64) Input {
	return Input{Kind: Release, Key: key, Holder: holder, Token: tok}
}
func ext(key, holder string, tok uint64) Input {
	return Input{Kind: Extend, Key: key, Holder: holder, Token: tok}
}
func chk(key string, tok uint64) Input { return Input{Kind: Check, Key: key, Token: tok} }
func get(key string) Input             { return Input{Kind: Get, Key: key} }

func granted(tok uint64) Output { return Output{Result: OK, Token: tok} }
func refused() Output           { return Output{Result: Refused} }
func unknown() Output           { return Output{} }
func answered(b bool) Output    { return Output{Result: OK, Bool: b} }
func found(holder string, tok uint64) Output {
	return Output{Result: OK, Holder: holder, Token: tok}
}

func wantLinearizable(t *testing.T, h *hb, want porcupine.CheckResult) {
	t.Helper()
	v := CheckLinearizable(h.ops, 10*time.Second)
	if v.Result != want {
		for _, o := range h.ops {
			t.Log(o)
		}
		t.Fatalf("linearizability: got %v, want %v", v.Result, want)
	}
	if want == porcupine.Illegal {
		// What a failed run leaves for a human to look at.
		path := filepath.Join(t.TempDir(), "history.html")
		if err := v.Visualize(path); err != nil {
			t.Fatalf("visualizing: %v", err)
		}
		if fi, err := os.Stat(path); err != nil || fi.Size() == 0 {
			t.Fatalf("no visualization written: %v", err)
		}
	}
}

func TestModelAcceptsLegalHistories(t *testing.T) {
	t.Run("sequential", func(t *testing.T) {
		h := (&hb{}).
			add(0, acq("k", "a"), 0, 1, granted(1)).
			add(1, acq("k", "b"), 2, 3, refused()).
			add(0, ext("k", "a", 1), 4, 5, Output{Result: OK}).
			add(1, ext("k", "b", 1), 6, 7, refused()).
			add(1, chk("k", 1), 8, 9, answered(true)).
			add(1, get("k"), 10, 11, found("a", 1)).
			add(0, acq("k", "a"), 12, 13, granted(3)). // a renewal: new token
			add(1, chk("k", 1), 14, 15, answered(false)).
			add(1, rel("k", "b", 0), 16, 17, answered(false)).
			add(0, rel("k", "a", 1), 18, 19, answered(false)). // superseded token
			add(0, rel("k", "a", 3), 20, 21, answered(true)).
			add(1, get("k"), 22, 23, refused()).
			add(1, acq("k", "b"), 24, 25, granted(7))
		wantLinearizable(t, h, porcupine.Ok)
	})
	t.Run("concurrent", func(t *testing.T) {
		// b's acquire overlaps a's release: it may come after it.
		h := (&hb{}).
			add(0, acq("k", "a"), 0, 1, granted(1)).
			add(0, rel("k", "a", 1), 2, 10, answered(true)).
			add(1, acq("k", "b"), 3, 9, granted(2))
		wantLinearizable(t, h, porcupine.Ok)
	})
	t.Run("unknown outcomes", func(t *testing.T) {
		// An acquire that timed out took effect after all; a release that
		// timed out did not: both are legal.
		h := (&hb{}).
			add(0, acq("k", "a"), 0, 1, unknown()).
			add(1, get("k"), 5, 6, found("a", 4)).
			add(1, chk("k", 4), 7, 8, answered(true)).
			add(0, rel("k", "a", 4), 9, 10, unknown()).
			add(1, get("k"), 11, 12, found("a", 4)).
			add(1, acq("k", "b"), 13, 14, refused())
		wantLinearizable(t, h, porcupine.Ok)
	})
	t.Run("re-sent wait", func(t *testing.T) {
		// A waiting acquire re-sent after a failover: the first copy was
		// granted (token 2, seen by a reader) and superseded by the
		// re-sent one's renewal (token 3).
		h := (&hb{}).
			wait(0, "k", "a", 0, 20, granted(3)).
			add(1, get("k"), 5, 6, found("a", 2))
		wantLinearizable(t, h, porcupine.Ok)
	})
	t.Run("abandoned wait", func(t *testing.T) {
		// A wait that timed out on the client: the server granted it and
		// released it when the waiter went away.
		h := (&hb{}).
			wait(0, "k", "a", 0, 20, unknown()).
			add(1, get("k"), 5, 6, found("a", 2)).
			add(1, get("k"), 30, 31, refused()).
			add(1, acq("k", "b"), 32, 33, granted(5))
		wantLinearizable(t, h, porcupine.Ok)
	})
}

func TestModelReportsViolations(t *testing.T) {
	cases := map[string]*hb{
		"reissued token": (&hb{}).
			add(0, acq("k", "a"), 0, 1, granted(5)).
			add(0, rel("k", "a", 5), 2, 3, answered(true)).
			add(1, acq("k", "b"), 4, 5, granted(5)),
		"token went backwards": (&hb{}).
			add(0, acq("k", "a"), 0, 1, granted(5)).
			add(0, rel("k", "a", 5), 2, 3, answered(true)).
			add(1, acq("k", "b"), 4, 5, granted(4)),
		"release by a non-holder": (&hb{}).
			add(0, acq("k", "a"), 0, 1, granted(1)).
			add(1, rel("k", "b", 0), 2, 3, answered(true)),
		"two holders": (&hb{}).
			add(0, acq("k", "a"), 0, 1, granted(1)).
			add(1, acq("k", "b"), 2, 3, granted(2)),
		"stale read after release": (&hb{}).
			add(0, acq("k", "a"), 0, 1, granted(1)).
			add(0, rel("k", "a", 1), 2, 3, answered(true)).
			add(1, get("k"), 4, 5, found("a", 1)),
		"stale check after renewal": (&hb{}).
			add(0, acq("k", "a"), 0, 1, granted(1)).
			add(0, acq("k", "a"), 2, 3, granted(2)).
			add(1, chk("k", 1), 4, 5, answered(true)),
		"extend of a superseded token": (&hb{}).
			add(0, acq("k", "a"), 0, 1, granted(1)).
			add(0, acq("k", "a"), 2, 3, granted(2)).
			add(0, ext("k", "a", 1), 4, 5, Output{Result: OK}),
		"lost grant": (&hb{}).
			add(0, acq("k", "a"), 0, 1, granted(1)).
			add(1, get("k"), 4, 5, refused()),
		"refused although free": (&hb{}).
			add(0, acq("k", "a"), 0, 1, refused()),
		"wait elapsed although free": (&hb{}).
			wait(0, "k", "a", 0, 10, refused()),
		"acknowledged wait released by the server": (&hb{}).
			wait(0, "k", "a", 0, 10, granted(1)).
			add(1, get("k"), 20, 21, refused()),
	}
	for name, h := range cases {
		t.Run(name, func(t *testing.T) { wantLinearizable(t, h, porcupine.Illegal) })
	}
}

func wantViolation(t *testing.T, vs []Violation, check, substr string) {
	t.Helper()
	for _, v := range vs {
		if v.Check == check && strings.Contains(v.Msg, substr) {
			return
		}
	}
	t.Fatalf("no %s violation mentioning %q reported; got %v", check, substr, vs)
}

func TestCheckTokens(t *testing.T) {
	good := (&hb{}).
		add(0, acq("k1", "a"), 0, 1, granted(1)).
		add(1, acq("k2", "b"), 0, 3, granted(3)).
		add(2, acq("k3", "c"), 2, 4, granted(2)) // concurrent with 3: any order
	if vs := CheckTokens(good.ops); len(vs) != 0 {
		t.Fatalf("legal tokens reported: %v", vs)
	}
	dup := (&hb{}).
		add(0, acq("k1", "a"), 0, 1, granted(7)).
		add(1, acq("k2", "b"), 5, 6, granted(7))
	wantViolation(t, CheckTokens(dup.ops), "tokens", "acknowledged twice")
	backwards := (&hb{}).
		add(0, acq("k1", "a"), 0, 1, granted(7)).
		add(1, acq("k2", "b"), 5, 6, granted(6))
	wantViolation(t, CheckTokens(backwards.ops), "tokens", "granted after token 7")
}

func TestCheckHeld(t *testing.T) {
	h := (&hb{}).
		add(0, acq("kept", "a"), 0, 1, granted(1)).
		add(1, acq("kept", "b"), 2, 3, refused()).
		add(0, acq("released", "a"), 0, 1, granted(2)).
		add(0, rel("released", "a", 2), 2, 3, unknown()).
		add(0, acq("lost", "a"), 0, 1, granted(3)).
		add(0, acq("renewed", "a"), 0, 1, granted(4)).
		add(0, acq("renewed", "a"), 2, 3, unknown())
	final := map[string]Final{
		"kept":     {Found: true, Holder: "a", Token: 1},
		"released": {Found: false},
		"lost":     {Found: false},
		"renewed":  {Found: true, Holder: "a", Token: 9},
	}
	vs := CheckHeld(h.ops, final)
	if len(vs) != 1 {
		t.Fatalf("want exactly the lost grant reported, got %v", vs)
	}
	wantViolation(t, vs, "held", "lost: acknowledged grant")
	final["lost"] = Final{Found: true, Holder: "a", Token: 99}
	wantViolation(t, CheckHeld(h.ops, final), "held", "lost: acknowledged grant")

	two := (&hb{}).
		add(0, acq("k", "a"), 0, 1, granted(1)).
		add(1, acq("k", "b"), 2, 3, granted(2))
	wantViolation(t, CheckHeld(two.ops, nil), "held", "all held at once")
}

func TestCheckExpiry(t *testing.T) {
	lease := func(holder string) Input {
		return Input{Kind: Acquire, Key: "e", Holder: holder, TTL: time.Second, Expires: true}
	}
	ok := (&hb{}).
		add(0, lease("a"), 0, 5, granted(1)).
		add(1, Input{Kind: Wait, Key: "e", Holder: "b", TTL: time.Second, Expires: true}, 10, 1002, granted(2))
	if vs := CheckExpiry(ok.ops); len(vs) != 0 {
		t.Fatalf("legal expiry reported: %v", vs)
	}
	early := (&hb{}).
		add(0, lease("a"), 0, 5, granted(1)).
		add(1, lease("b"), 10, 990, granted(2))
	wantViolation(t, CheckExpiry(early.ops), "expiry", "granted to b")
	// A release by the first holder lifts the bound.
	released := (&hb{}).
		add(0, lease("a"), 0, 5, granted(1)).
		add(0, Input{Kind: Release, Key: "e", Holder: "a", Token: 1, Expires: true}, 6, 7, answered(true)).
		add(1, lease("b"), 10, 20, granted(2))
	if vs := CheckExpiry(released.ops); len(vs) != 0 {
		t.Fatalf("a released lease reported: %v", vs)
	}
}

func TestRecorderWaitPhantoms(t *testing.T) {
	r := NewRecorder()
	id := r.Wait(3, Input{Key: "k", Holder: "a"})
	r.EndWait(id, granted(4))
	open := r.Start(1, get("k"))
	ops := r.Ops()
	if len(ops) != 4 || ops[0].Input.Kind != Wait || ops[1].Input.Kind != PhantomGrant || ops[2].Input.Kind != PhantomRelease {
		t.Fatalf("ops: %v", ops)
	}
	if ops[1].Return != ops[0].Return || ops[0].Output.Token != 4 || ops[open].Output.Result != Unknown {
		t.Fatalf("ops: %v", ops)
	}
}

func TestCheckLease(t *testing.T) {
	held := LeaseRecord{Holder: "h", Token: 7, Sent: ms(900), FaultAt: ms(500), Final: Final{Found: true, Holder: "h", Token: 7}}
	if vs := CheckLease(held); len(vs) != 0 {
		t.Fatalf("a lease that rode through reported: %v", vs)
	}
	lost := held
	lost.Lost = errors.New("lease lost: server unreachable")
	wantViolation(t, CheckLease(lost), "lease", "was lost")
	untested := held
	untested.Sent = ms(400)
	wantViolation(t, CheckLease(untested), "lease", "no extension sent after the fault")
	gone := held
	gone.Final = Final{Found: true, Holder: "other", Token: 8}
	wantViolation(t, CheckLease(gone), "lease", "healed cluster answers")
}

func TestCheckShared(t *testing.T) {
	ok := []Hold{
		{Key: "sem", Holder: "a", Token: 1, Start: ms(0), End: ms(10)},
		{Key: "sem", Holder: "b", Token: 2, Start: ms(5), End: ms(20)},
		{Key: "sem", Holder: "c", Token: 3, Start: ms(10), End: ms(30)}, // a's end touches c's start
		{Key: "rw", Holder: "r1", Token: 4, Start: ms(0), End: ms(10)},
		{Key: "rw", Holder: "r2", Token: 5, Start: ms(2), End: ms(10)},
		{Key: "rw", Holder: "w", Token: 6, Write: true, Start: ms(10), End: ms(20)},
	}
	if vs := CheckShared(ok, map[string]int{"sem": 2}); len(vs) != 0 {
		t.Fatalf("legal holds: %v", vs)
	}
	third := append(ok[:3:3], Hold{Key: "sem", Holder: "d", Token: 7, Start: ms(6), End: ms(8)})
	wantViolation(t, CheckShared(third, map[string]int{"sem": 2}), "permits", "3 holds of a 2-permit")
	mixed := append(ok[3:6:6], Hold{Key: "rw", Holder: "r3", Token: 8, Start: ms(15), End: ms(16)})
	wantViolation(t, CheckShared(mixed, nil), "rwlock", "a writer beside 1 other")
	dup := append(ok[:1:1], Hold{Key: "rw", Holder: "x", Token: 1, Start: ms(50), End: ms(60)})
	wantViolation(t, CheckShared(dup, nil), "tokens", "token 1 granted")
}
