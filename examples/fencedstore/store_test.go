package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fencelock/fencelock/fence"
	"github.com/fencelock/fencelock/fence/filefence"
)

func put(t *testing.T, url, value, token string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPut, url, strings.NewReader(value))
	if token != "" {
		req.Header.Set("Fencing-Token", token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func TestStore(t *testing.T) {
	for _, tc := range []struct {
		fenced                      bool
		stale, missing, equal, next int
		final                       string
	}{
		{true, 409, 409, 200, 200, `{"name":"x","value":"B2","token":8}` + "\n"},
		{false, 200, 200, 200, 200, `{"name":"x","value":"B2","token":8}` + "\n"},
	} {
		var f fence.Fence
		if tc.fenced {
			f = fence.NewGuard()
		}
		srv := httptest.NewServer(newHandler(f))
		u := srv.URL + "/v/x"
		if got := put(t, u, "B", "7"); got != 200 {
			t.Fatalf("fenced=%v: first put %d", tc.fenced, got)
		}
		if got := put(t, u, "A-stale", "6"); got != tc.stale {
			t.Errorf("fenced=%v: stale put %d, want %d", tc.fenced, got, tc.stale)
		}
		if got := put(t, u, "nobody", ""); got != tc.missing {
			t.Errorf("fenced=%v: tokenless put %d, want %d", tc.fenced, got, tc.missing)
		}
		if got := put(t, u, "B1", "7"); got != tc.equal {
			t.Errorf("fenced=%v: same-token put %d, want %d", tc.fenced, got, tc.equal)
		}
		if got := put(t, u, "B2", "8"); got != tc.next {
			t.Errorf("fenced=%v: newer put %d, want %d", tc.fenced, got, tc.next)
		}
		if got := get(t, u); got != tc.final {
			t.Errorf("fenced=%v: final %q, want %q", tc.fenced, got, tc.final)
		}
		srv.Close()
	}
}

// With --state, the marks outlive the store: a new store on the same
// directory still refuses the token the old one had superseded.
func TestRestartedStoreStillRefusesAStaleToken(t *testing.T) {
	dir := t.TempDir()
	start := func() (*httptest.Server, *filefence.Fence) {
		f, err := filefence.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		return httptest.NewServer(newHandler(f)), f
	}
	srv, f := start()
	if got := put(t, srv.URL+"/v/x", "B", "7"); got != 200 {
		t.Fatalf("first put %d", got)
	}
	srv.Close()
	f.Close()

	srv, f = start()
	defer f.Close()
	defer srv.Close()
	if got := put(t, srv.URL+"/v/x", "A-stale", "6"); got != 409 {
		t.Fatalf("stale put after restart %d, want 409", got)
	}
	if got := put(t, srv.URL+"/v/x", "B1", "7"); got != 200 {
		t.Fatalf("current holder after restart %d, want 200", got)
	}
	if got := get(t, srv.URL+"/v/x"); got != `{"name":"x","value":"B1","token":7}`+"\n" {
		t.Fatalf("final %q", got)
	}
}
