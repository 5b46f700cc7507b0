package server

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// A session over HTTP: open, locks under it, one extend keeps them all,
// the leader's tick at its expiry ends them all at once and hands a key to
// its waiter under that waiter's own session.
func TestHTTPSessionLifecycle(t *testing.T) {
	ts, fake := fakeClockServer(t)
	a := ts.post("/v1/session/open", `{"holder":"svc","ttl_ms":10000}`)
	if a.status != 200 || a.body["id"] != 1.0 || a.body["remaining_ms"] != 10000.0 {
		t.Fatalf("open: %d %v", a.status, a.body)
	}
	for _, k := range []string{"a", "b"} {
		l := ts.post("/v1/acquire", `{"key":"`+k+`","holder":"svc","session":1}`)
		if l.status != 200 || l.body["session"] != 1.0 || l.body["ttl_ms"] != 10000.0 {
			t.Fatalf("acquire %s under the session: %d %v", k, l.status, l.body)
		}
	}
	all := ts.post("/v1/acquire-all", `{"keys":["c","d"],"holder":"svc","session":1}`)
	if all.status != 200 || len(all.body["locks"].([]any)) != 2 {
		t.Fatalf("acquire-all under the session: %d %v", all.status, all.body)
	}
	w := ts.post("/v1/session/open", `{"holder":"w","ttl_ms":60000}`)
	if w.status != 200 {
		t.Fatalf("open w: %v", w.body)
	}
	waited := make(chan answer, 1)
	go func() {
		waited <- ts.do(context.Background(), "POST", "/v1/acquire", `{"key":"b","holder":"w","session":2,"wait_ms":60000}`)
	}()
	eventually(t, "w queued on b", func() bool { return ts.queued("b", "w") })

	fake.Advance(6 * time.Second)
	if e := ts.post("/v1/session/extend", `{"id":1,"holder":"svc"}`); e.status != 200 || e.body["remaining_ms"] != 10000.0 || e.body["locks"] != 4.0 {
		t.Fatalf("extend: %d %v", e.status, e.body)
	}
	fake.Advance(6 * time.Second) // 12 s: alive only because of the extend
	if g := ts.get("/v1/lock?key=a"); g.status != 200 {
		t.Fatalf("a after the extend: %d %v", g.status, g.body)
	}
	fake.Advance(4 * time.Second) // 16 s: the session expired at 16 s
	got := <-waited
	if got.status != 200 || got.body["holder"] != "w" || got.body["session"] != 2.0 {
		t.Fatalf("w's wait: %d %v", got.status, got.body)
	}
	for _, k := range []string{"a", "c", "d"} {
		if g := ts.get("/v1/lock?key=" + k); g.status != 404 {
			t.Fatalf("%s outlived its session: %d %v", k, g.status, g.body)
		}
	}
	if e := ts.post("/v1/session/extend", `{"id":1,"holder":"svc"}`); e.status != 404 || e.body["code"] != "no_session" {
		t.Fatalf("extend of an expired session: %d %v", e.status, e.body)
	}
	// Close releases at once.
	c := ts.post("/v1/session/close", `{"id":2,"holder":"w"}`)
	if c.status != 200 || c.body["locks"] != 1.0 {
		t.Fatalf("close: %d %v", c.status, c.body)
	}
	if g := ts.get("/v1/lock?key=b"); g.status != 404 {
		t.Fatalf("b after close: %d %v", g.status, g.body)
	}
}

func TestHTTPSessionRefusals(t *testing.T) {
	ts, _ := fakeClockServer(t)
	ts.post("/v1/session/open", `{"holder":"svc","ttl_ms":10000}`)
	ts.post("/v1/acquire", `{"key":"x","holder":"other","ttl_ms":10000}`)
	for _, c := range []struct{ path, body, code string }{
		{"/v1/session/open", `{"holder":"svc","ttl_ms":5}`, "invalid_argument"},
		{"/v1/session/extend", `{"holder":"svc"}`, "invalid_argument"},
		{"/v1/session/extend", `{"id":1,"holder":"intruder"}`, "no_session"},
		{"/v1/session/close", `{"id":1,"holder":"intruder"}`, "no_session"},
		{"/v1/acquire", `{"key":"k","holder":"intruder","session":1}`, "no_session"},
		{"/v1/acquire", `{"key":"k","holder":"svc","ttl_ms":1000,"lock_delay_ms":60001}`, "invalid_argument"},
		{"/v1/acquire-all", `{"keys":[],"holder":"svc","ttl_ms":1000}`, "invalid_argument"},
		{"/v1/acquire-all", `{"keys":["a","a"],"holder":"svc","ttl_ms":1000}`, "invalid_argument"},
		{"/v1/acquire-all", `{"keys":["a","x"],"holder":"svc","ttl_ms":1000}`, "held"},
	} {
		a := ts.post(c.path, c.body)
		if a.body["code"] != c.code {
			t.Fatalf("%s %s: %d %v, want %s", c.path, c.body, a.status, a.body, c.code)
		}
	}
	if g := ts.get("/v1/lock?key=a"); g.status != 404 {
		t.Fatalf("a refused acquire-all left a granted: %v", g.body)
	}
	l := ts.post("/v1/acquire", `{"key":"s","holder":"svc","session":1}`)
	tok := l.body["token"]
	if e := ts.post("/v1/extend", fmt.Sprintf(`{"key":"s","holder":"svc","token":%v,"ttl_ms":1000}`, tok)); e.body["code"] != "not_held" {
		t.Fatalf("extend of a session lock: %v", e.body)
	}
}

// Lock-delay over HTTP: an expired lease with a delay keeps the key from
// everyone for the delay; the answer says for how long.
func TestHTTPLockDelay(t *testing.T) {
	ts, fake := fakeClockServer(t)
	if a := ts.post("/v1/acquire", `{"key":"k","holder":"a","ttl_ms":1000,"lock_delay_ms":5000}`); a.status != 200 {
		t.Fatalf("acquire: %v", a.body)
	}
	fake.Advance(2 * time.Second)
	eventually(t, "k expired", func() bool { _, ok := ts.fsm.Get("k", ts.fsm.Now()); return !ok && ts.fsm.Now() >= 2e9 })
	b := ts.post("/v1/acquire", `{"key":"k","holder":"b","ttl_ms":1000}`)
	if b.status != 409 || b.body["code"] != "lock_delay" || b.body["remaining_ms"] != 4000.0 {
		t.Fatalf("acquire in the delay: %d %v", b.status, b.body)
	}
	fake.Advance(4 * time.Second)
	if b := ts.post("/v1/acquire", `{"key":"k","holder":"b","ttl_ms":1000}`); b.status != 200 {
		t.Fatalf("acquire after the delay: %d %v", b.status, b.body)
	}
}

// With ACLs on, a session belongs to the principal that owns its holder:
// another principal cannot extend it, close it or lock under it.
func TestHTTPSessionACL(t *testing.T) {
	ts := startServer(t, fastConfig(""))
	admin := ts.bootstrap()
	alice := ts.token(admin, "alice", "jobs/:lock")
	mallory := ts.token(admin, "mallory", "jobs/:lock")
	if a := ts.authDo("POST", "/v1/session/open", `{"holder":"alice","ttl_ms":10000}`, alice); a.status != 200 {
		t.Fatalf("alice opens: %d %v", a.status, a.body)
	}
	if a := ts.authDo("POST", "/v1/acquire", `{"key":"jobs/1","holder":"alice","session":1}`, alice); a.status != 200 {
		t.Fatalf("alice locks under it: %d %v", a.status, a.body)
	}
	for _, c := range []struct{ path, body string }{
		{"/v1/session/open", `{"holder":"alice","ttl_ms":10000}`},
		{"/v1/session/extend", `{"id":1,"holder":"alice"}`},
		{"/v1/session/close", `{"id":1,"holder":"alice"}`},
		{"/v1/acquire", `{"key":"jobs/2","holder":"alice","session":1}`},
		{"/v1/acquire-all", `{"keys":["jobs/3"],"holder":"alice","session":1}`},
	} {
		if a := ts.authDo("POST", c.path, c.body, mallory); a.status != 403 {
			t.Fatalf("mallory %s: %d %v", c.path, a.status, a.body)
		}
	}
	for _, c := range []struct{ path, body string }{
		{"/v1/session/extend", `{"id":1,"holder":"mallory"}`},
		{"/v1/session/close", `{"id":1,"holder":"mallory"}`},
		{"/v1/acquire", `{"key":"jobs/2","holder":"mallory","session":1}`},
	} {
		if a := ts.authDo("POST", c.path, c.body, mallory); a.status != 404 || a.body["code"] != "no_session" {
			t.Fatalf("mallory as herself %s: %d %v", c.path, a.status, a.body)
		}
	}
	if a := ts.authDo("POST", "/v1/acquire-all", `{"keys":["other/1"],"holder":"alice","session":1}`, alice); a.status != 403 {
		t.Fatalf("acquire-all outside alice's prefix: %d %v", a.status, a.body)
	}
	if a := ts.authDo("POST", "/v1/session/extend", `{"id":1,"holder":"alice"}`, alice); a.status != 200 || a.body["locks"] != 1.0 {
		t.Fatalf("alice extends: %d %v", a.status, a.body)
	}
}

// A wait under a session ends when the session does, answered no_session.
func TestHTTPWaitUnderSessionEndsWithIt(t *testing.T) {
	ts, fake := fakeClockServer(t)
	ts.post("/v1/acquire", `{"key":"k","holder":"a","ttl_ms":60000}`)
	ts.post("/v1/session/open", `{"holder":"w","ttl_ms":5000}`)
	waited := make(chan answer, 1)
	go func() {
		waited <- ts.do(context.Background(), "POST", "/v1/acquire", `{"key":"k","holder":"w","session":1,"wait_ms":60000}`)
	}()
	eventually(t, "w queued", func() bool { return ts.queued("k", "w") })
	fake.Advance(5 * time.Second)
	got := <-waited
	if got.status != 404 || got.body["code"] != "no_session" {
		t.Fatalf("wait under an expired session: %d %v", got.status, got.body)
	}
	if len(ts.Waiters("k")) != 0 {
		t.Fatalf("queue after the session's end: %v", ts.Waiters("k"))
	}
}

func TestSessionMetrics(t *testing.T) {
	ts, _ := fakeClockServer(t)
	ts.post("/v1/session/open", `{"holder":"svc","ttl_ms":10000}`)
	ts.post("/v1/acquire-all", `{"keys":["a","b"],"holder":"svc","session":1}`)
	resp, err := http.Get(ts.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, want := range []string{"fencelock_sessions 1\n", "fencelock_session_locks 2\n"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}
