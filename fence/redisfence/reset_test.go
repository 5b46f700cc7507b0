package redisfence_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/fence"
	"github.com/fencelock/fencelock/fence/redisfence"
)

// Finding 5 of issue 43 in Redis: a mark was mended with HSET, and
// nothing recorded it. Reset lowers it (only, unless Raise), keeps its
// binding, and appends who, why and what to a stream in the mark's hash
// slot, in the same script; the holder writes again.
func TestResetLowersOnlyAndIsRecorded(t *testing.T) {
	c, _, r := newFence(t)
	v := &fence.Verification{
		Verifier: verifierFunc(func(context.Context, string, uint64) error { return nil }),
		Key:      func(string) string { return "ledger/alice" },
	}
	f := redisfence.New(c, redisfence.WithVerification(v))
	if redisfence.Slot(f.ResetsKey(r)) != redisfence.Slot(f.MarkKey(r)) {
		t.Fatalf("%s and %s in different slots", f.ResetsKey(r), f.MarkKey(r))
	}
	if _, err := c.Do(ctx, "DEL", f.ResetsKey(r)); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(ctx, r, math.MaxInt64); err != nil {
		t.Fatal(err)
	}
	before := time.Now().Add(-time.Minute)
	reset := func(to uint64, raise bool, user, reason string) (redisfence.Mark, error) {
		return f.Reset(ctx, fence.ResetRequest{Resource: r, To: to, Raise: raise, User: user, Reason: reason})
	}
	if _, err := reset(8, false, "u", "r"); err != nil {
		t.Fatal(err)
	}
	if m, err := reset(9, false, "u", "r"); !errors.Is(err, fence.ErrResetRaises) || m.Token != 8 {
		t.Fatalf("raise: %+v %v", m, err)
	}
	if _, err := f.Reset(ctx, fence.ResetRequest{Resource: r + "-none", To: 1, User: "u", Reason: "r"}); !errors.Is(err, fence.ErrNoMark) {
		t.Fatalf("no mark: %v", err)
	}
	m, err := reset(7, false, "ops", "a token typed while testing ✓")
	if err != nil || m.Token != 8 || m.LastWrite != 8 || m.Key != "ledger/alice" || m.Raised.Before(before) {
		t.Fatalf("reset: %+v %v", m, err)
	}
	if _, err := f.Write(ctx, r, 7); err != nil {
		t.Fatalf("the live holder after the reset: %v", err)
	}
	if _, err := f.Write(ctx, r, 6); !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("below the reset mark: %v", err)
	}
	if m, err := reset(100, true, "ops", "retire"); err != nil || m.Token != 7 {
		t.Fatalf("raise with Raise: %+v %v", m, err)
	}
	if got := markOf(t, f, r); got.Token != 100 || got.LastWrite != 7 || got.Key != "ledger/alice" {
		t.Fatalf("after the raise: %+v", got)
	}
	if _, err := reset(0, false, "ops", "forget it"); err != nil {
		t.Fatal(err)
	}
	if got := markOf(t, f, r); got != (redisfence.Mark{}) {
		t.Fatalf("the forgotten mark: %+v", got)
	}
	for _, bad := range []fence.ResetRequest{{Resource: r, To: 1 << 63}, {Resource: "a{b}", To: 1}} {
		if _, err := f.Reset(ctx, bad); err == nil {
			t.Fatalf("%+v: no error", bad)
		}
	}

	reply, err := c.Do(ctx, "XRANGE", f.ResetsKey(r), "-", "+")
	if err != nil {
		t.Fatal(err)
	}
	entries, _ := reply.([]any)
	var got []string
	for _, e := range entries {
		fields := e.([]any)[1].([]any)
		kv := map[string]string{}
		for i := 0; i+1 < len(fields); i += 2 {
			kv[fields[i].(string)] = fields[i+1].(string)
		}
		got = append(got, fmt.Sprintf("%s %q %s %s/%s -> %s/%s %s", kv["os_user"], kv["reason"], kv["resource"],
			kv["token_before"], kv["write_token_before"], kv["token_after"], kv["write_token_after"], kv["lock_key"]))
		if kv["at_ms"] == "" {
			t.Fatalf("entry without at_ms: %v", kv)
		}
	}
	want := []string{
		`u "r" R 9223372036854775807/9223372036854775807 -> 8/8 ledger/alice`,
		`ops "a token typed while testing ✓" R 8/8 -> 7/7 ledger/alice`,
		`ops "retire" R 7/7 -> 100/7 ledger/alice`,
		`ops "forget it" R 100/7 -> 0/0 ledger/alice`,
	}
	for i := range want {
		want[i] = strings.Replace(want[i], " R ", " "+r+" ", 1)
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("recorded\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// With WithMarkKey the resets stream follows the mark's own key, in its
// slot, tagged or not.
func TestResetsKeyFollowsTheMark(t *testing.T) {
	for _, mk := range []func(string) string{
		func(r string) string { return "app:{" + r + "}:fence" },
		func(r string) string { return "app:fence:" + r },
	} {
		f := redisfence.New(nil, redisfence.WithMarkKey(mk))
		if rk := f.ResetsKey("acct:42"); redisfence.Slot(rk) != redisfence.Slot(f.MarkKey("acct:42")) || rk == f.MarkKey("acct:42") {
			t.Fatalf("%s beside %s", rk, f.MarkKey("acct:42"))
		}
	}
	if got := redisfence.New(nil).ResetsKey("acct:42"); got != "fencelock:resets:{acct:42}" {
		t.Fatalf("default %s", got)
	}
}
