package server

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// The bytes of the answers, as clients in other languages see them. The
// api package declares the types; this pins the encoding the server
// writes (field order, omitted fields, the trailing newline).
func TestAnswersOnTheWire(t *testing.T) {
	ts, _ := fakeClockServer(t)
	for _, c := range []struct{ method, path, body, want string }{
		{"POST", "/v1/acquire", `{"key":"k","holder":"a","ttl_ms":10000}`,
			`{"key":"k","holder":"a","token":1,"ttl_ms":10000,"remaining_ms":10000}`},
		{"POST", "/v1/acquire", `{"key":"k","holder":"b","ttl_ms":10000}`,
			`{"error":"held by another holder","code":"held","holder":"a","remaining_ms":10000}`},
		{"POST", "/v1/acquire", `{"key":"k","holder":"b","ttl_ms":50}`,
			`{"error":"ttl_ms must be between 100 and 86400000","code":"invalid_argument","field":"ttl_ms"}`},
		{"POST", "/v1/extend-batch", `{"holder":"a","ttl_ms":10000,"leases":[{"key":"k","token":1},{"key":"k","token":9}]}`,
			`{"results":[{"key":"k","token":1,"ok":true,"lease":{"key":"k","holder":"a","token":1,"ttl_ms":10000,"remaining_ms":10000}},` +
				`{"key":"k","token":9,"ok":false,"code":"not_held","error":"not the live holder of this token"}]}`},
		{"GET", "/v1/check?key=k&token=1", "", `{"key":"k","token":1,"valid":true}`},
		{"GET", "/v1/locks?prefix=k", "", `{"locks":[{"key":"k","holder":"a","token":1,"ttl_ms":10000,"remaining_ms":10000}]}`},
		{"GET", "/v1/locks?prefix=z", "", `{"locks":[]}`},
		{"GET", "/v1/lock?key=z", "", `{"error":"no live lease on this key","code":"not_found"}`},
		{"POST", "/v1/release", `{"key":"k","holder":"a"}`, `{"released":true}`},
		{"GET", "/healthz", "", `{"status":"ok"}`},
		{"GET", "/readyz", "", `{"status":"ready"}`},
		{"PUT", "/readyz", "", `{"error":"PUT is not allowed on /readyz; use GET","code":"method_not_allowed"}`},
		{"GET", "/nowhere", "", `{"error":"no such route: /nowhere","code":"not_found"}`},
	} {
		req, err := http.NewRequest(c.method, ts.url+c.path, strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		if c.body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if got := string(raw); got != c.want+"\n" {
			t.Errorf("%s %s %s\n got %s want %s", c.method, c.path, c.body, got, c.want)
		}
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s %s: Content-Type %q", c.method, c.path, ct)
		}
	}
}
