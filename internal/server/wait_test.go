package server

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock/clock"
	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/locktable"
)

// eventually polls cond, bounded; it decides nothing by sleeping.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

type grant struct {
	holder string
	token  uint64
	status int
}

func TestHandOffIsFIFOAndOnePerWaiter(t *testing.T) {
	ts, _ := fakeClockServer(t)
	const n = 6
	first := ts.post("/v1/acquire", `{"key":"q","holder":"h0","ttl_ms":60000}`)
	if first.status != 200 {
		t.Fatalf("first acquire: %v", first.body)
	}
	grants := make(chan grant, n)
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := 1; i <= n; i++ {
		holder := fmt.Sprintf("h%d", i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			// The grant is reported before the release, so the channel
			// holds grants in the order they happened.
			a := ts.do(context.Background(), "POST", "/v1/acquire",
				`{"key":"q","holder":"`+holder+`","ttl_ms":60000,"wait_ms":60000}`)
			grants <- grant{holder: holder, token: num(a, "token"), status: a.status}
			if a.status == 200 {
				ts.do(context.Background(), "POST", "/v1/release",
					fmt.Sprintf(`{"key":"q","holder":%q,"token":%d}`, holder, num(a, "token")))
			}
		}()
		// Arrival order is queue order: start the next waiter only once
		// this one is queued.
		eventually(t, holder+" queued", func() bool { return len(ts.fsm.Waiters("q")) == i })
	}
	ts.post("/v1/release", `{"key":"q","holder":"h0"}`)
	var order []grant
	for range n {
		order = append(order, <-grants)
	}
	wg.Wait()
	seen := map[uint64]bool{}
	for i, g := range order {
		want := fmt.Sprintf("h%d", i+1)
		if g.status != 200 || g.holder != want {
			t.Fatalf("grant %d went to %s (status %d), want %s; order %+v", i, g.holder, g.status, want, order)
		}
		if seen[g.token] || g.token <= num(first, "token") {
			t.Fatalf("token %d repeated or not newer: %+v", g.token, order)
		}
		seen[g.token] = true
		if i > 0 && g.token <= order[i-1].token {
			t.Fatalf("tokens not increasing: %+v", order)
		}
	}
	if w := ts.fsm.Waiters("q"); len(w) != 0 {
		t.Fatalf("waiters left: %v", w)
	}
	if last := ts.fsm.LastToken(); last != n+1 {
		t.Fatalf("%d tokens issued for %d grants", last, n+1)
	}
}

func TestWaitElapsedAnswersHeld(t *testing.T) {
	ts, fake := fakeClockServer(t)
	ts.post("/v1/acquire", `{"key":"k","holder":"a","ttl_ms":60000}`)
	got := make(chan answer, 1)
	go func() {
		got <- ts.do(context.Background(), "POST", "/v1/acquire", `{"key":"k","holder":"b","ttl_ms":1000,"wait_ms":150}`)
	}()
	eventually(t, "b queued", func() bool { return ts.queued("k", "b") })
	fake.Advance(150 * time.Millisecond)
	a := <-got
	if a.status != 409 || a.body["code"] != "held" || a.body["holder"] != "a" {
		t.Fatalf("elapsed wait: %d %v", a.status, a.body)
	}
	if w := ts.fsm.Waiters("k"); len(w) != 0 {
		t.Fatalf("waiter still queued: %v", w)
	}
}

func TestWaitGrantedWhenLeaseExpires(t *testing.T) {
	ts, fake := fakeClockServer(t)
	ts.post("/v1/acquire", `{"key":"k","holder":"a","ttl_ms":200}`)
	got := make(chan answer, 1)
	go func() {
		got <- ts.do(context.Background(), "POST", "/v1/acquire", `{"key":"k","holder":"b","ttl_ms":1000,"wait_ms":60000}`)
	}()
	eventually(t, "b queued", func() bool { return ts.queued("k", "b") })
	fake.Advance(200 * time.Millisecond)
	a := <-got
	if a.status != 200 || a.body["holder"] != "b" || num(a, "token") != 2 {
		t.Fatalf("wait across expiry: %d %v", a.status, a.body)
	}
	if got := ts.metric("fencelock_lease_ends_total", "reason", "expired"); got != 1 {
		t.Fatalf("expired leases counted %v, want 1", got)
	}
	if got := ts.metric("fencelock_grants_total", "waited", "true"); got != 1 {
		t.Fatalf("hand-off grants counted %v, want 1", got)
	}
}

func TestWaitImmediateGrant(t *testing.T) {
	ts, _ := fakeClockServer(t)
	a := ts.post("/v1/acquire", `{"key":"free","holder":"a","ttl_ms":1000,"wait_ms":1000}`)
	if a.status != 200 || num(a, "token") != 1 {
		t.Fatalf("wait on a free key: %d %v", a.status, a.body)
	}
}

func TestShutdownEndsWaiters(t *testing.T) {
	ts, _ := fakeClockServer(t)
	ts.post("/v1/acquire", `{"key":"k","holder":"a","ttl_ms":60000}`)
	got := make(chan answer, 1)
	go func() {
		got <- ts.do(context.Background(), "POST", "/v1/acquire", `{"key":"k","holder":"b","ttl_ms":1000,"wait_ms":60000}`)
	}()
	eventually(t, "b queued", func() bool { return len(ts.fsm.Waiters("k")) == 1 })
	ts.BeginShutdown()
	a := <-got
	if a.status != 503 || a.body["code"] != "unavailable" {
		t.Fatalf("waiter at shutdown: %d %v", a.status, a.body)
	}
	if w := ts.fsm.Waiters("k"); len(w) != 0 {
		t.Fatalf("queue after shutdown: %v", w)
	}
	if a := ts.get("/readyz"); a.status != 503 {
		t.Fatalf("readyz while shutting down: %d", a.status)
	}
	if a := ts.post("/v1/acquire", `{"key":"z","holder":"a","ttl_ms":1000}`); a.status != 503 || a.body["code"] != "unavailable" {
		t.Fatalf("write while shutting down: %d %v", a.status, a.body)
	}
	if a := ts.get("/v1/lock?key=k"); a.status != 200 {
		t.Fatalf("reads go on while in-flight requests drain: %d %v", a.status, a.body)
	}
}

func TestRestartKeepsLeasesTokensAndDropsOrphanWaiters(t *testing.T) {
	dir := t.TempDir()
	cfg := fastConfig(dir)
	fake := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	cfg.Clock = fake
	cfg.SnapshotThreshold = 8
	cfg.TrailingLogs = 4
	ts := startServer(t, cfg)
	var tokens []uint64
	for i := range 20 {
		a := ts.post("/v1/acquire", fmt.Sprintf(`{"key":"k%d","holder":"h","ttl_ms":600000}`, i))
		tokens = append(tokens, num(a, "token"))
	}
	// A queued waiter with no request behind it after the restart.
	now, _ := ts.ClusterTime()
	if res, err := ts.ProposeForTest(fsm.Command{Op: fsm.OpWait, Key: "k0", Holder: "w", TTL: locktable.Second, Deadline: now + locktable.Time(time.Hour)}); err != nil || !res.Queued {
		t.Fatalf("wait: %+v %v", res, err)
	}
	if err := ts.snapshotter(t).Snapshot(); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	ts.post("/v1/release", `{"key":"k19","holder":"h"}`) // after the snapshot: replayed from the log
	before := ts.fsm.Now()
	ts.stop()

	fake.Advance(time.Hour) // the downtime
	ts2 := startServer(t, cfg)
	// Cluster time resumes from the last applied time: it moved forward by
	// this process's own run time (none on the fake clock), not by the
	// downtime.
	if now2, _ := ts2.ClusterTime(); now2 != before {
		t.Fatalf("cluster time %d after restart; before %d", now2, before)
	}
	if w := ts2.fsm.Waiters("k0"); len(w) != 0 {
		t.Fatalf("orphan waiter survived the restart: %v", w)
	}
	if ts2.fsm.Now() < before {
		t.Fatalf("cluster time went back: %d < %d", ts2.fsm.Now(), before)
	}
	for i, tok := range tokens[:19] {
		a := ts2.get(fmt.Sprintf("/v1/check?key=k%d&token=%d", i, tok))
		if a.body["valid"] != true {
			t.Fatalf("k%d token %d lost: %v", i, tok, a.body)
		}
	}
	if a := ts2.get("/v1/lock?key=k19"); a.status != 404 {
		t.Fatalf("k19 released before the restart is back: %v", a.body)
	}
	a := ts2.post("/v1/acquire", `{"key":"new","holder":"h","ttl_ms":1000}`)
	if num(a, "token") <= slices.Max(tokens) {
		t.Fatalf("token %d after restart, not above %d", num(a, "token"), slices.Max(tokens))
	}
}

func TestDataDirInUseFailsFast(t *testing.T) {
	dir := t.TempDir()
	startServer(t, fastConfig(dir))
	s, err := New(fastConfig(dir))
	if err == nil {
		s.Close()
		t.Fatal("a second server opened a data directory in use")
	}
	if !strings.Contains(err.Error(), "in use") {
		t.Fatalf("error %q does not say the directory is in use", err)
	}
}

// While something is held, cluster time reaches the log even when no
// client writes, so a restart cannot rewind it far.
func TestClockCheckpointRecordsTimeWhileHeld(t *testing.T) {
	ts, fake := fakeClockServer(t)
	a := ts.post("/v1/acquire", `{"key":"k","holder":"h","ttl_ms":600000}`)
	if a.status != 200 {
		t.Fatalf("acquire: %v", a.body)
	}
	start := ts.fsm.Now()
	// No client writes: only the checkpoint can move the log's time.
	fake.Advance(DefaultConfig().ClockCheckpoint)
	eventually(t, "a checkpoint", func() bool { return ts.fsm.Now() >= start+locktable.Time(DefaultConfig().ClockCheckpoint) })
	// With nothing held there is no deadline, so the timer sleeps.
	ts.post("/v1/release", `{"key":"k","holder":"h"}`)
	if _, ok := ts.fsm.NextDeadline(); ok {
		t.Fatal("a deadline remains with nothing held")
	}
}
