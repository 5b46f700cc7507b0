package redisfence_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/fencelock/fencelock/fence"
	"github.com/fencelock/fencelock/fence/fencetest"
	"github.com/fencelock/fencelock/fence/redisfence"
	"github.com/fencelock/fencelock/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

var ctx = context.Background()

// newFence is a fence on the test server and the name of a resource of
// the test's own, whose mark and data keys no other test touches.
func newFence(t testing.TB, opts ...redisfence.Option) (*redisfence.Client, *redisfence.Fence, string) {
	t.Helper()
	c := redisfence.NewClient(redistest.Addr(t))
	t.Cleanup(func() { c.Close() })
	r := strings.NewReplacer("/", ":", " ", "_").Replace(t.Name())
	for _, k := range []string{"fencelock:mark:{" + r + "}", "{" + r + "}:v", "{" + r + "}:h", "{" + r + "}:n", "{" + r + "}:log"} {
		if _, err := c.Do(ctx, "DEL", k); err != nil {
			t.Fatal(err)
		}
	}
	return c, redisfence.New(c, opts...), r
}

func get(t testing.TB, c *redisfence.Client, key string) string {
	t.Helper()
	v, err := c.Do(ctx, "GET", key)
	if err != nil {
		t.Fatal(err)
	}
	if v == nil {
		return "<none>"
	}
	return v.(string)
}

func markOf(t testing.TB, f *redisfence.Fence, r string) redisfence.Mark {
	t.Helper()
	m, err := f.Mark(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// Every outcome of Write, in order on one resource.
func TestWriteOutcomes(t *testing.T) {
	c, f, r := newFence(t)
	k := "{" + r + "}:v"
	for _, s := range []struct {
		name      string
		token     uint64
		wantErr   error
		wantMark  uint64
		wantValue string
	}{
		{"no token is refused, nothing stored", 0, fence.ErrMissingToken, 0, "<none>"},
		{"new resource is admitted", 5, nil, 5, "v5"},
		{"equal token is admitted (many writes per grant)", 5, nil, 5, "v5"},
		{"higher token is admitted and raises the mark", 9, nil, 9, "v9"},
		{"lower token is refused, its write never happens", 7, fence.ErrStaleToken, 9, "v9"},
		{"a token of more digits is higher (compared as numbers, not text)", 10, nil, 10, "v10"},
		{"and one of fewer is lower", 9, fence.ErrStaleToken, 10, "v10"},
	} {
		_, err := f.Write(ctx, r, s.token, redisfence.Set(k, fmt.Sprintf("v%d", s.token)))
		if (s.wantErr == nil) != (err == nil) || (s.wantErr != nil && !errors.Is(err, s.wantErr)) {
			t.Fatalf("%s: err %v, want %v", s.name, err, s.wantErr)
		}
		if m := markOf(t, f, r); m.Token != s.wantMark || m.LastWrite != s.wantMark {
			t.Fatalf("%s: mark %+v, want %d", s.name, m, s.wantMark)
		}
		if v := get(t, c, k); v != s.wantValue {
			t.Fatalf("%s: value %q, want %q", s.name, v, s.wantValue)
		}
	}
	_, err := f.Write(ctx, r, 3, redisfence.Set(k, "x"))
	var se *fence.StaleTokenError
	if !errors.As(err, &se) || se.Token != 3 || se.Highest != 10 || se.Resource != r {
		t.Fatalf("stale error %#v", err)
	}
}

// Tokens past 2^53 are compared exactly (Lua's numbers are doubles),
// and tokens past 2^63-1 are refused before anything is sent.
func TestLargeTokens(t *testing.T) {
	c, f, r := newFence(t)
	k := "{" + r + "}:v"
	if _, err := f.Write(ctx, r, 1<<53+1, redisfence.Set(k, "above")); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(ctx, r, 1<<53, redisfence.Set(k, "below")); !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("2^53 after 2^53+1: %v", err)
	}
	for _, tok := range []uint64{1 << 63, 1<<64 - 1} {
		if _, err := f.Write(ctx, r, tok, redisfence.Set(k, "huge")); err == nil || !strings.Contains(err.Error(), "2^63-1") {
			t.Fatalf("token %d: %v", tok, err)
		}
	}
	if m := markOf(t, f, r); m.Token != 1<<53+1 || get(t, c, k) != "above" {
		t.Fatalf("mark %+v value %q", m, get(t, c, k))
	}
}

// SET, HSET, INCRBY, DEL and XADD in one fenced write, their replies in
// order; then a fenced read.
func TestOps(t *testing.T) {
	_, f, r := newFence(t)
	tag := "{" + r + "}"
	out, err := f.Write(ctx, r, 4,
		redisfence.Set(tag+":v", "hello"),
		redisfence.HSet(tag+":h", "owner", "alice", "plan", "pro"),
		redisfence.IncrBy(tag+":n", 40),
		redisfence.IncrBy(tag+":n", 2),
		redisfence.XAdd(tag+":log", "*", "op", "deposit", "amount", "42"),
		redisfence.Del(tag+":v"),
	)
	if err != nil {
		t.Fatal(err)
	}
	if out[0] != "OK" || out[1] != int64(2) || out[2] != int64(40) || out[3] != int64(42) || out[5] != int64(1) {
		t.Fatalf("replies %v", out)
	}
	if id, _ := out[4].(string); !strings.Contains(id, "-") {
		t.Fatalf("XADD reply %v", out[4])
	}
	got, err := f.Read(ctx, r, 4, redisfence.HGetAll(tag+":h"), redisfence.Get(tag+":n"), redisfence.Get(tag+":v"), redisfence.Cmd("XLEN", tag+":log"))
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != "[[owner alice plan pro] 42 <nil> 1]" {
		t.Fatalf("read %v", got)
	}
	if _, err := f.Read(ctx, r, 4, redisfence.Set(tag+":v", "x")); err == nil || !strings.Contains(err.Error(), "not a read") {
		t.Fatalf("a write in Read: %v", err)
	}
}

// An op that fails inside the script (WRONGTYPE) stops it there: the
// mark is raised, the ops before it are done, the ones after are not.
func TestOpFailure(t *testing.T) {
	c, f, r := newFence(t)
	tag := "{" + r + "}"
	if _, err := f.Write(ctx, r, 1, redisfence.Set(tag+":h", "a string")); err != nil {
		t.Fatal(err)
	}
	_, err := f.Write(ctx, r, 6, redisfence.IncrBy(tag+":n", 1), redisfence.HSet(tag+":h", "f", "v"), redisfence.IncrBy(tag+":n", 100))
	var oe *redisfence.OpError
	if !errors.As(err, &oe) || oe.Index != 1 || oe.Cmd != "HSET" || !strings.Contains(oe.Msg, "WRONGTYPE") {
		t.Fatalf("err %v", err)
	}
	if m := markOf(t, f, r); m.Token != 6 || get(t, c, tag+":n") != "1" {
		t.Fatalf("mark %+v counter %q", m, get(t, c, tag+":n"))
	}
}

// Keys outside the mark's hash slot, unknown commands and resources that
// would break the hash tag are refused before anything is sent.
func TestRefusedBeforeSending(t *testing.T) {
	c, f, r := newFence(t)
	for _, s := range []struct {
		name     string
		resource string
		op       redisfence.Op
		want     string
	}{
		{"a key without the tag", r, redisfence.Set("balance:"+r, "1"), "slot"},
		{"another resource's tag", r, redisfence.Set("{other}:v", "1"), "slot"},
		{"a multi-key command", r, redisfence.Cmd("RENAME", "{"+r+"}:v", "{"+r+"}:w"), "not a single-key command"},
		{"a script in a script", r, redisfence.Cmd("EVAL", "{"+r+"}:v", "return 1", "0"), "not a single-key command"},
		{"braces in the resource", "a{b}", redisfence.Set("{a{b}}:v", "1"), "braces"},
		{"an empty resource", "", redisfence.Set("{}:v", "1"), "braces"},
	} {
		_, err := f.Write(ctx, s.resource, 5, s.op)
		if err == nil || !strings.Contains(err.Error(), s.want) {
			t.Fatalf("%s: %v", s.name, err)
		}
	}
	if _, err := f.Write(ctx, r, 5, redisfence.Set("balance:"+r, "1")); !errors.Is(err, redisfence.ErrCrossSlot) {
		t.Fatalf("cross-slot: %v", err)
	}
	if m := markOf(t, f, r); m.Token != 0 {
		t.Fatalf("mark %+v", m)
	}
	if n, _ := c.Do(ctx, "EXISTS", "balance:"+r); n != int64(0) {
		t.Fatal("written")
	}
}

// Redis Cluster's slot function: the vector of its specification, and
// hash tags.
func TestSlot(t *testing.T) {
	if s := redisfence.Slot("123456789"); s != 0x31C3 {
		t.Fatalf("slot %d, want %d", s, 0x31C3)
	}
	same := [][2]string{
		{"{user1000}.following", "{user1000}.followers"},
		{"fencelock:mark:{acct:42}", "{acct:42}:balance"},
		{"foo{{bar}}zap", "{{bar}"},  // the tag is "{bar"
		{"foo{}{bar}", "foo{}{bar}"}, // an empty first tag: the whole key
	}
	for _, p := range same {
		if redisfence.Slot(p[0]) != redisfence.Slot(p[1]) {
			t.Fatalf("%q and %q in different slots", p[0], p[1])
		}
	}
	if redisfence.Slot("foo{}{bar}") == redisfence.Slot("bar") {
		t.Fatal("an empty tag took the next one")
	}
}

// After SCRIPT FLUSH (as after a restart) EVALSHA answers NOSCRIPT and
// the fence sends the script with EVAL.
func TestScriptFlushed(t *testing.T) {
	c, f, r := newFence(t)
	k := "{" + r + "}:v"
	if _, err := f.Write(ctx, r, 2, redisfence.Set(k, "a")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Do(ctx, "SCRIPT", "FLUSH"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(ctx, r, 3, redisfence.Set(k, "b")); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(ctx, r, 2, redisfence.Set(k, "c")); !errors.Is(err, fence.ErrStaleToken) || get(t, c, k) != "b" {
		t.Fatalf("stale after the flush: %v, value %q", err, get(t, c, k))
	}
}

// rw is the fence as a fence.RWFence for fencetest: a write or read with
// no ops checks and raises the mark alone; the effect runs after it.
// (redisfence is not a fence.Fence: a Go effect cannot run inside the
// script; its effect is the ops.)
type rw struct{ f *redisfence.Fence }

func (a rw) AdmitWrite(ctx context.Context, resource string, token uint64, effect func(context.Context) error) error {
	if _, err := a.f.Write(ctx, resource, token); err != nil {
		return err
	}
	return effect(ctx)
}

func (a rw) AdmitRead(ctx context.Context, resource string, token uint64, effect func(context.Context) error) error {
	if _, err := a.f.Read(ctx, resource, token); err != nil {
		return err
	}
	return effect(ctx)
}

// fence.RWFence's rule (fencetest), with a new client (new connections)
// after every step.
func TestReadWriteRule(t *testing.T) {
	c, f, _ := newFence(t)
	if _, err := c.Do(ctx, "DEL", f.MarkKey("doc")); err != nil {
		t.Fatal(err)
	}
	fencetest.CheckRW(t, rw{f}, func() fence.RWFence {
		c := redisfence.NewClient(redistest.Addr(t))
		t.Cleanup(func() { c.Close() })
		return rw{redisfence.New(c)}
	})
	if m := markOf(t, f, "doc"); m.Token != 8 || m.LastWrite != 7 {
		t.Fatalf("mark %+v", m)
	}
}

// A mark survives a crash of the server (SIGKILL) and its restart: the
// append-only file, fsynced before each reply, holds it.
func TestMarksSurviveACrash(t *testing.T) {
	c, f, r := newFence(t)
	k := "{" + r + "}:v"
	if _, err := f.Write(ctx, r, 9, redisfence.Set(k, "nine")); err != nil {
		t.Fatal(err)
	}
	redistest.Kill(t)
	redistest.Restart(t)
	if _, err := f.Write(ctx, r, 8, redisfence.Set(k, "eight")); !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("after the restart: %v", err)
	}
	if m := markOf(t, f, r); m.Token != 9 || get(t, c, k) != "nine" || m.Raised.IsZero() {
		t.Fatalf("mark %+v value %q", m, get(t, c, k))
	}
}
