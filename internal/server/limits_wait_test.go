package server

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock/clock"
	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/locktable"
)

// limitedServer is fakeClockServer with the wait queues capped.
func limitedServer(t *testing.T, perKey, total int) *testServer {
	t.Helper()
	cfg := fastConfig("")
	cfg.Clock = clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	cfg.MinTickInterval = time.Nanosecond
	cfg.MaxWaitersPerKey, cfg.MaxWaiters = perKey, total
	return startServer(t, cfg)
}

// queueWaiters starts n waits by holders w0.. on key and returns once all
// are queued; they are cancelled when the test ends.
func queueWaiters(t *testing.T, ts *testServer, key string, n int) {
	t.Helper()
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(context.Background())
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ts.do(ctx, "POST", "/v1/acquire", fmt.Sprintf(`{"key":%q,"holder":"w%d","ttl_ms":60000,"wait_ms":3600000}`, key, i))
		}()
	}
	eventually(t, fmt.Sprintf("%d waiters on %s", n, key), func() bool { return len(ts.fsm.Waiters(key)) == n })
	t.Cleanup(func() { cancel(); wg.Wait() })
}

// TestWaitersPerKeyCap: with MaxWaitersPerKey 3, the 4th waiter on a key is
// answered 429 too_many_waiters at once, the queue is as it was, the
// refusal is counted, and another key still queues. Before the cap, 50,000
// waiters were accepted on one key.
func TestWaitersPerKeyCap(t *testing.T) {
	ts := limitedServer(t, 3, 0)
	for _, k := range []string{"k", "j"} {
		if a := ts.post("/v1/acquire", `{"key":"`+k+`","holder":"owner","ttl_ms":60000}`); a.status != 200 {
			t.Fatalf("acquire %s: %d %v", k, a.status, a.body)
		}
	}
	queueWaiters(t, ts, "k", 3)
	before := ts.fsm.Waiters("k")
	last := ts.fsm.AppliedIndex()
	a := ts.post("/v1/acquire", `{"key":"k","holder":"late","ttl_ms":60000,"wait_ms":60000}`)
	if a.status != 429 || a.body["code"] != "too_many_waiters" {
		t.Fatalf("4th waiter: %d %v; want 429 too_many_waiters", a.status, a.body)
	}
	if got := ts.fsm.Waiters("k"); fmt.Sprint(got) != fmt.Sprint(before) {
		t.Fatalf("queue %v after the refusal, was %v", got, before)
	}
	if got := ts.metric("fencelock_wait_queue_full_total", "scope", "key"); got != 1 {
		t.Fatalf("fencelock_wait_queue_full_total{scope=key} = %v", got)
	}
	if ts.fsm.AppliedIndex() != last+1 {
		t.Fatalf("the refusal took %d entries", ts.fsm.AppliedIndex()-last)
	}
	queueWaiters(t, ts, "j", 1)
}

// TestWaitersTotalCap: MaxWaiters counts the waiters of every key; a free
// key is still granted at once.
func TestWaitersTotalCap(t *testing.T) {
	ts := limitedServer(t, 0, 3)
	for _, k := range []string{"a", "b"} {
		if a := ts.post("/v1/acquire", `{"key":"`+k+`","holder":"owner","ttl_ms":60000}`); a.status != 200 {
			t.Fatalf("acquire %s: %d %v", k, a.status, a.body)
		}
	}
	queueWaiters(t, ts, "a", 2)
	queueWaiters(t, ts, "b", 1)
	a := ts.post("/v1/acquire", `{"key":"b","holder":"x","ttl_ms":60000,"wait_ms":60000}`)
	if a.status != 429 || a.body["code"] != "too_many_waiters" {
		t.Fatalf("4th waiter in all: %d %v; want 429 too_many_waiters", a.status, a.body)
	}
	if got := ts.metric("fencelock_wait_queue_full_total", "scope", "total"); got != 1 {
		t.Fatalf("fencelock_wait_queue_full_total{scope=total} = %v", got)
	}
	if n := ts.fsm.QueuedCount(); n != 3 {
		t.Fatalf("%d waiters queued", n)
	}
	if a := ts.post("/v1/acquire", `{"key":"free","holder":"x","ttl_ms":60000,"wait_ms":60000}`); a.status != 200 {
		t.Fatalf("a free key: %d %v", a.status, a.body)
	}
}

// TestWaitLimitsDefaultAndOff: the defaults cap at 1,000 and 100,000;
// -1 sends no cap in the command.
func TestWaitLimitsDefaultAndOff(t *testing.T) {
	d := Config{}.withDefaults()
	if d.MaxWaitersPerKey != 1000 || d.MaxWaiters != 100000 {
		t.Fatalf("defaults %d, %d", d.MaxWaitersPerKey, d.MaxWaiters)
	}
	sc := serviceConfig(Config{MaxWaitersPerKey: -1, MaxWaiters: -1}.withDefaults(), nil)
	if sc.MaxWaitersPerKey != 0 || sc.MaxWaiters != 0 {
		t.Fatal("-1 must send no cap")
	}
}

// TestClockJumpIsRefusedAndTheLeaderResumes: a leader whose clock jumps
// past fsm.MaxClockStep while a lease is held (a process frozen for more
// than a day) has its stamp refused by the state machine; it resumes its
// clock from the applied time and serves on, instead of every later
// proposal failing.
func TestClockJumpIsRefusedAndTheLeaderResumes(t *testing.T) {
	ts, fake := fakeClockServer(t)
	if a := ts.post("/v1/acquire", `{"key":"k","holder":"a","ttl_ms":86400000}`); a.status != 200 {
		t.Fatalf("acquire: %d %v", a.status, a.body)
	}
	applied := ts.fsm.Now()
	fake.Advance(time.Duration(fsm.MaxClockStep) + time.Hour)
	a := ts.post("/v1/acquire", `{"key":"j","holder":"b","ttl_ms":10000}`)
	if a.status != 200 {
		t.Fatalf("acquire after the jump: %d %v", a.status, a.body)
	}
	if now := ts.fsm.Now(); now < applied || now > applied+locktable.Time(time.Minute) {
		t.Fatalf("cluster time moved from %v to %v across a refused jump", time.Duration(applied), time.Duration(now))
	}
	if g := ts.get("/v1/lock?key=k"); g.status != 200 || g.body["holder"] != "a" {
		t.Fatalf("the day-long lease after the refused jump: %d %v", g.status, g.body)
	}
}
