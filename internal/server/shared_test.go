package server

import (
	"context"
	"fmt"
	"testing"
	"time"
)

func TestSemaphoreOverHTTP(t *testing.T) {
	ts, _ := fakeClockServer(t)
	acq := func(holder, extra string) answer {
		return ts.post("/v1/acquire", `{"key":"pool","holder":"`+holder+`","ttl_ms":60000,"permits":2`+extra+`}`)
	}
	a, b := acq("a", ""), acq("b", "")
	if a.status != 200 || b.status != 200 || num(b, "token") != num(a, "token")+1 {
		t.Fatalf("two permits: %v %v", a.body, b.body)
	}
	if a.body["kind"] != "semaphore" || num(a, "permits") != 2 {
		t.Fatalf("answer kind: %v", a.body)
	}
	if c := acq("c", ""); c.status != 409 || c.body["code"] != "held" {
		t.Fatalf("third holder without waiting: %d %v", c.status, c.body)
	}
	for _, tc := range []struct{ body, code, field string }{
		{`{"key":"pool","holder":"x","ttl_ms":60000,"permits":3}`, "kind_mismatch", ""},
		{`{"key":"pool","holder":"x","ttl_ms":60000}`, "kind_mismatch", ""},
		{`{"key":"pool","holder":"x","ttl_ms":60000,"mode":"read"}`, "kind_mismatch", ""},
		{`{"key":"pool","holder":"x","ttl_ms":60000,"permits":1001}`, "invalid_argument", "permits"},
		{`{"key":"pool","holder":"x","ttl_ms":60000,"permits":-1}`, "invalid_argument", "permits"},
		{`{"key":"pool","holder":"x","ttl_ms":60000,"permits":2,"mode":"read"}`, "invalid_argument", "mode"},
		{`{"key":"pool","holder":"x","ttl_ms":60000,"mode":"upgrade"}`, "invalid_argument", "mode"},
	} {
		r := ts.post("/v1/acquire", tc.body)
		if r.body["code"] != tc.code || (tc.field != "" && r.body["field"] != tc.field) {
			t.Fatalf("%s: %d %v", tc.body, r.status, r.body)
		}
		if tc.code == "kind_mismatch" && (r.status != 409 || r.body["kind"] != "semaphore" || num(r, "permits") != 2) {
			t.Fatalf("%s: %d %v", tc.body, r.status, r.body)
		}
	}
	got := make(chan answer, 1)
	go func() { got <- acq("c", `,"wait_ms":60000`) }()
	eventually(t, "c queued", func() bool { return ts.queued("pool", "c") })
	rel := ts.post("/v1/release", fmt.Sprintf(`{"key":"pool","holder":"a","token":%d}`, num(a, "token")))
	if rel.body["released"] != true {
		t.Fatalf("release a: %v", rel.body)
	}
	c := <-got
	if c.status != 200 || num(c, "token") <= num(b, "token") || c.body["kind"] != "semaphore" || num(c, "slot") != 1 || num(b, "slot") != 2 {
		t.Fatalf("c after a's release: %d %v", c.status, c.body)
	}
	list := ts.get("/v1/locks?prefix=pool")
	locks, _ := list.body["locks"].([]any)
	if len(locks) != 2 {
		t.Fatalf("list: %v", list.body)
	}
	one := ts.get("/v1/lock?key=pool")
	if hs, _ := one.body["holders"].([]any); len(hs) != 2 || one.body["holder"] != "b" {
		t.Fatalf("get: %v", one.body)
	}
	for tok, want := range map[uint64]bool{num(a, "token"): false, num(b, "token"): true, num(c, "token"): true} {
		if ch := ts.get(fmt.Sprintf("/v1/check?key=pool&token=%d", tok)); ch.body["valid"] != want {
			t.Fatalf("check %d: %v, want %v", tok, ch.body, want)
		}
	}
	ext := ts.post("/v1/extend", fmt.Sprintf(`{"key":"pool","holder":"c","token":%d,"ttl_ms":90000}`, num(c, "token")))
	if ext.status != 200 || num(ext, "ttl_ms") != 90000 || ext.body["kind"] != "semaphore" {
		t.Fatalf("extend c: %v", ext.body)
	}
	if x := ts.post("/v1/extend", fmt.Sprintf(`{"key":"pool","holder":"c","token":%d,"ttl_ms":90000}`, num(b, "token"))); x.body["code"] != "not_held" {
		t.Fatalf("extend c under b's token: %v", x.body)
	}
}

func TestReadWriteLockOverHTTP(t *testing.T) {
	ts, fake := fakeClockServer(t)
	acq := func(ctx context.Context, holder, mode string, wait int) answer {
		return ts.do(ctx, "POST", "/v1/acquire", fmt.Sprintf(`{"key":"rw","holder":%q,"ttl_ms":10000,"mode":%q,"wait_ms":%d}`, holder, mode, wait))
	}
	r1 := acq(context.Background(), "r1", "read", 0)
	if r1.status != 200 || r1.body["mode"] != "read" || r1.body["kind"] != "rwlock" {
		t.Fatalf("r1: %v", r1.body)
	}
	w, r2 := make(chan answer, 1), make(chan answer, 1)
	go func() { w <- acq(context.Background(), "w", "write", 60000) }()
	eventually(t, "w queued", func() bool { return ts.queued("rw", "w") })
	go func() { r2 <- acq(context.Background(), "r2", "read", 60000) }()
	eventually(t, "r2 queued behind the writer", func() bool { return ts.queued("rw", "r2") })
	if x := acq(context.Background(), "r3", "read", 0); x.body["code"] != "held" {
		t.Fatalf("a reader that does not wait is refused behind a queued writer: %v", x.body)
	}
	// A waiter that gives up leaves the queue.
	ctx, cancel := context.WithCancel(context.Background())
	gone := make(chan answer, 1)
	go func() { gone <- acq(ctx, "r4", "read", 60000) }()
	eventually(t, "r4 queued", func() bool { return ts.queued("rw", "r4") })
	cancel()
	<-gone
	eventually(t, "r4 gone from the queue", func() bool { return !ts.queued("rw", "r4") })

	fake.Advance(10 * time.Second) // r1 expires: the writer's turn
	wa := <-w
	if wa.status != 200 || wa.body["mode"] != "write" || num(wa, "token") <= num(r1, "token") {
		t.Fatalf("writer: %d %v", wa.status, wa.body)
	}
	if ts.queued("rw", "r2") != true {
		t.Fatal("r2 must still wait while the writer holds")
	}
	ts.post("/v1/release", `{"key":"rw","holder":"w"}`)
	ra := <-r2
	if ra.status != 200 || ra.body["mode"] != "read" || num(ra, "token") <= num(wa, "token") {
		t.Fatalf("r2 after the writer: %d %v", ra.status, ra.body)
	}
}
