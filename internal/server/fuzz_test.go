package server

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// FuzzHandlers: whatever a client sends, the answer is JSON and never a
// 5xx (the server is up and leading, so nothing but a bug could be one).
func FuzzHandlers(f *testing.F) {
	s, err := New(fastConfig(""))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() {
		s.BeginShutdown()
		s.Close()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.WaitReady(ctx); err != nil {
		f.Fatal(err)
	}
	h := s.Handler()
	for _, seed := range []struct {
		method, target, body string
	}{
		{"POST", "/v1/acquire", `{"key":"k","holder":"h","ttl_ms":1000}`},
		{"POST", "/v1/acquire", `{"key":"k","holder":"h","ttl_ms":1000,"wait_ms":1}`},
		{"POST", "/v1/renew", `{"key":"k","holder":"h","ttl_ms":1000}`},
		{"POST", "/v1/extend", `{"key":"k","holder":"h","token":1,"ttl_ms":1000}`},
		{"POST", "/v1/extend-batch", `{"holder":"h","ttl_ms":1000,"leases":[{"key":"k","token":1}]}`},
		{"POST", "/v1/release", `{"key":"k","holder":"h","token":1}`},
		{"GET", "/v1/check?key=k&token=1", ``},
		{"GET", "/v1/lock?key=k", ``},
		{"GET", "/v1/locks?prefix=k&limit=3", ``},
		{"POST", "/v1/acquire", `{"key":"\u0000","holder":"\ud800","ttl_ms":1e3}`},
		{"PUT", "/v1/acquire", `{}`},
	} {
		f.Add(seed.method, seed.target, []byte(seed.body))
	}
	f.Fuzz(func(t *testing.T, method, target string, body []byte) {
		if method != "GET" && method != "POST" {
			method = "POST"
		}
		req, err := http.NewRequest(method, "http://fencelock"+target, bytes.NewReader(body))
		if err != nil || req.URL.Path == "" {
			return
		}
		req.Header.Set("Content-Type", "application/json") // past the browser checks, to the decoders
		// Waits are bounded so one input cannot stall the fuzzer.
		ctx, cancel := context.WithTimeout(req.Context(), 200*time.Millisecond)
		defer cancel()
		req = req.WithContext(ctx)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code >= 500 && !(rec.Code == 503 && ctx.Err() != nil) {
			t.Fatalf("%s %s %q: %d %s", method, target, body, rec.Code, rec.Body)
		}
		if ct := rec.Header().Get("Content-Type"); req.URL.Path != "/metrics" && ct != "application/json" {
			t.Fatalf("%s %s: content type %q", method, target, ct)
		}
	})
}
