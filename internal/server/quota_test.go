package server

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/fencelock/fencelock/api"
)

// Issue 24, finding 5: one holder was capped at 1,024 sessions, but one
// principal with many holder names (bob/0, bob/1, ...) opened sessions
// without end and would have filled the table's 1,048,576 for everyone.
// Sessions, leases (and queue places) and queue places now have a quota
// per principal, whatever holder names it uses; past one the answer is
// 429 quota_exceeded naming it, and other principals are not touched.

func quotaServer(t *testing.T) (*testServer, string) {
	t.Helper()
	cfg := fastConfig("")
	cfg.MaxSessionsPerPrincipal, cfg.MaxLocksPerPrincipal, cfg.MaxWaitersPerPrincipal, cfg.WatchMaxPerCaller = 5, 6, 3, 2
	ts := startServer(t, cfg)
	return ts, ts.bootstrap()
}

func wantQuota(t *testing.T, what string, a answer, quota string) {
	t.Helper()
	msg, _ := a.body["error"].(string)
	if a.status != 429 || a.body["code"] != api.CodeQuotaExceeded && a.body["code"] != api.CodeTooManyWatchers || a.body["quota"] != quota ||
		!strings.Contains(msg, quota) {
		t.Errorf("%s: %d %v, want 429 naming the quota %s", what, a.status, a.body, quota)
	}
}

func TestQuotaSessionsPerPrincipal(t *testing.T) {
	ts, admin := quotaServer(t)
	bob := ts.token(admin, "bob", "b/:lock")
	carol := ts.token(admin, "carol", "c/:lock")
	var first uint64
	for i := range 5 {
		a := ts.authDo("POST", api.PathSessionOpen, fmt.Sprintf(`{"holder":"bob/%d","ttl_ms":60000}`, i), bob)
		if a.status != 200 {
			t.Fatalf("session %d: %d %v", i, a.status, a.body)
		}
		if i == 0 {
			first = num(a, "id")
		}
	}
	applied := ts.fsm.AppliedIndex()
	wantQuota(t, "bob's sixth session", ts.authDo("POST", api.PathSessionOpen, `{"holder":"bob/other","ttl_ms":60000}`, bob), api.QuotaSessions)
	if ts.fsm.AppliedIndex() != applied {
		t.Error("the refused session was proposed")
	}
	if a := ts.authDo("POST", api.PathSessionOpen, `{"holder":"carol","ttl_ms":60000}`, carol); a.status != 200 {
		t.Errorf("carol's session: %d %v", a.status, a.body)
	}
	// Closing one makes room again.
	if a := ts.authDo("POST", api.PathSessionClose, fmt.Sprintf(`{"holder":"bob/0","id":%d}`, first), bob); a.status != 200 {
		t.Fatalf("close: %d %v", a.status, a.body)
	}
	if a := ts.authDo("POST", api.PathSessionOpen, `{"holder":"bob/other","ttl_ms":60000}`, bob); a.status != 200 {
		t.Errorf("a session after a close: %d %v", a.status, a.body)
	}
	if got := ts.metric("fencelock_quota_refusals_total", "quota", "sessions"); got != 1 {
		t.Errorf("fencelock_quota_refusals_total{quota=sessions} = %v", got)
	}
}

func TestQuotaLocksAndWaitersPerPrincipal(t *testing.T) {
	ts, admin := quotaServer(t)
	bob := ts.token(admin, "bob", "b/:lock")
	for i := range 3 {
		if a := ts.authDo("POST", api.PathAcquire, acquireBody(fmt.Sprintf("b/held%d", i), "admin", 60000, ""), admin); a.status != 200 {
			t.Fatal(a.status, a.body)
		}
	}
	// Three queue places (the waiters quota), each under its own holder.
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ts.doAuth(ctx, "POST", api.PathAcquire, fmt.Sprintf(`{"key":"b/held%d","holder":"bob/w%d","ttl_ms":60000,"wait_ms":3600000}`, i, i), bob)
		}()
	}
	eventually(t, "three waits to queue", func() bool {
		n := 0
		for i := range 3 {
			n += len(ts.fsm.Waiters(fmt.Sprintf("b/held%d", i)))
		}
		return n == 3
	})
	wantQuota(t, "bob's fourth wait", ts.authDo("POST", api.PathAcquire, `{"key":"b/held0","holder":"bob/w9","ttl_ms":60000,"wait_ms":1000}`, bob), api.QuotaWaiters)
	// Locks count leases and queue places: 3 places + 3 leases = 6.
	for i := range 3 {
		if a := ts.authDo("POST", api.PathAcquire, acquireBody(fmt.Sprintf("b/mine%d", i), fmt.Sprintf("bob/h%d", i), 60000, ""), bob); a.status != 200 {
			t.Fatalf("lease %d: %d %v", i, a.status, a.body)
		}
	}
	wantQuota(t, "bob's seventh lock", ts.authDo("POST", api.PathAcquire, acquireBody("b/mine9", "bob/h9", 60000, ""), bob), api.QuotaLocks)
	wantQuota(t, "bob's acquire-all", ts.authDo("POST", api.PathAcquireAll, `{"keys":["b/x","b/y"],"holder":"bob/all","ttl_ms":60000}`, bob), api.QuotaLocks)
	// A renewal by acquire of a key it holds adds nothing and passes.
	if a := ts.authDo("POST", api.PathAcquire, acquireBody("b/mine0", "bob/h0", 60000, ""), bob); a.status != 200 {
		t.Errorf("re-acquire of a held key at the quota: %d %v", a.status, a.body)
	}
	// Releasing makes room.
	if a := ts.authDo("POST", api.PathRelease, `{"key":"b/mine1","holder":"bob/h1"}`, bob); a.status != 200 {
		t.Fatal(a.status, a.body)
	}
	if a := ts.authDo("POST", api.PathAcquire, acquireBody("b/mine9", "bob/h9", 60000, ""), bob); a.status != 200 {
		t.Errorf("acquire after a release: %d %v", a.status, a.body)
	}
	// The admin has no quota trouble of bob's.
	if a := ts.authDo("POST", api.PathAcquire, acquireBody("b/admin", "admin", 60000, ""), admin); a.status != 200 {
		t.Errorf("admin: %d %v", a.status, a.body)
	}
}

func TestQuotaWatchesPerPrincipal(t *testing.T) {
	ts, admin := quotaServer(t)
	bob := ts.token(admin, "bob", "b/:read")
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ts.doAuth(ctx, "GET", watchURL(q("prefix", "b/", "wait_ms", "300000")), "", bob)
		}()
	}
	eventually(t, "two watches", func() bool { return testWatchers(ts.Server) == 2 })
	wantQuota(t, "bob's third watch", ts.authDo("GET", watchURL(q("prefix", "b/", "wait_ms", "0")), "", bob), api.QuotaWatches)
	if got := ts.metric("fencelock_quota_refusals_total", "quota", "watches"); got != 1 {
		t.Errorf("fencelock_quota_refusals_total{quota=watches} = %v", got)
	}
}

// doAuth is authDo that gives up with ctx and reads nothing back.
func (ts *testServer) doAuth(ctx context.Context, method, path, body, token string) {
	req, err := newAuthRequest(ctx, ts.url, method, path, body, token)
	if err != nil {
		return
	}
	if resp, err := httpClient.Do(req); err == nil {
		resp.Body.Close()
	}
}

var httpClient = http.DefaultClient

func newAuthRequest(ctx context.Context, url, method, path, body, token string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, url+path, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	return req, nil
}

// Issue 41, item 4: one principal, under holders mallory/0, mallory/1, …,
// could fill a key's whole queue (1,000 by default), and every other
// principal was answered 429 too_many_waiters there. A principal now has a
// share of each key's queue (a quarter of it by default): past it its
// wait is answered 429 quota_exceeded naming key_waiters, and the others
// still queue. The share travels in the wait command, so the refusal is
// the table's, the same on every node.
func TestQuotaKeyWaitersPerPrincipal(t *testing.T) {
	cfg := fastConfig("")
	cfg.MaxWaitersPerKey = 8 // a share of 2
	ts := startServer(t, cfg)
	admin := ts.bootstrap()
	mallory := ts.token(admin, "mallory", "jobs/:lock")
	alice := ts.token(admin, "alice", "jobs/:lock")
	if a := ts.authDo("POST", api.PathAcquire, acquireBody("jobs/x", "admin", 600000, ""), admin); a.status != 200 {
		t.Fatal(a.status, a.body)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	wait := func(holder, token string) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ts.doAuth(ctx, "POST", api.PathAcquire, fmt.Sprintf(`{"key":"jobs/x","holder":%q,"ttl_ms":60000,"wait_ms":3600000}`, holder), token)
		}()
	}
	for i := range 2 {
		wait(fmt.Sprintf("mallory/%d", i), mallory)
		eventually(t, "mallory's waits to queue", func() bool { return len(ts.fsm.Waiters("jobs/x")) == i+1 })
	}
	refused := ts.authDo("POST", api.PathAcquire, `{"key":"jobs/x","holder":"mallory/2","ttl_ms":60000,"wait_ms":1000}`, mallory)
	wantQuota(t, "mallory's third wait on the key", refused, api.QuotaKeyWaiters)
	if msg, _ := refused.body["error"].(string); !strings.Contains(msg, "--max-waiters-per-key-per-principal") {
		t.Errorf("the refusal does not name its flag: %q", msg)
	}
	for i := range 2 {
		wait(fmt.Sprintf("alice/%d", i), alice)
		eventually(t, "alice's waits to queue", func() bool { return len(ts.fsm.Waiters("jobs/x")) == 3+i })
	}
	if got := ts.metric("fencelock_quota_refusals_total", "quota", api.QuotaKeyWaiters); got != 1 {
		t.Errorf("fencelock_quota_refusals_total{quota=key_waiters} = %v", got)
	}
	if got := ts.metric("fencelock_quota_limit", "quota", api.QuotaKeyWaiters); got != 2 {
		t.Errorf("fencelock_quota_limit{quota=key_waiters} = %v", got)
	}
}
