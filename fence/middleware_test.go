package fence

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestMiddleware(t *testing.T) {
	g := NewGuard()
	var value string
	store := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			io.WriteString(w, value)
			return
		}
		b, _ := io.ReadAll(r.Body)
		value = string(b)
		w.WriteHeader(http.StatusNoContent)
	})
	srv := httptest.NewServer(Middleware(g, nil, store, http.MethodGet))
	defer srv.Close()

	put := func(token, body string) (int, map[string]any) {
		req, _ := http.NewRequest(http.MethodPut, srv.URL+"/balance", strings.NewReader(body))
		if token != "" {
			req.Header.Set(Header, token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&m)
		return resp.StatusCode, m
	}

	cases := []struct {
		token, body string
		status      int
		code        string
		value       string
	}{
		{"", "no token", 409, "missing_token", ""},
		{"abc", "garbage", 400, "invalid_token", ""},
		{"0", "zero", 400, "invalid_token", ""},
		{"33", "A", 204, "", "A"},
		{"34", "B", 204, "", "B"},
		{"34", "B2", 204, "", "B2"},
		{"33", "A-stale", 409, "stale_token", "B2"},
	}
	for _, c := range cases {
		status, body := put(c.token, c.body)
		if status != c.status {
			t.Fatalf("token %q: status %d, want %d (%v)", c.token, status, c.status, body)
		}
		if c.code != "" && body["code"] != c.code {
			t.Fatalf("token %q: code %v, want %s", c.token, body["code"], c.code)
		}
		if value != c.value {
			t.Fatalf("token %q: value %q, want %q", c.token, value, c.value)
		}
	}
	_, body := put("12", "old")
	if body["token"] != float64(12) || body["highest"] != float64(34) {
		t.Fatalf("stale body %v must name both tokens", body)
	}
	resp, err := http.Get(srv.URL + "/balance")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "B2" || resp.StatusCode != 200 {
		t.Fatalf("GET passes unfenced: %d %q", resp.StatusCode, b)
	}
}

type brokenFence struct{}

func (brokenFence) Admit(context.Context, string, uint64, func(context.Context) error) error {
	return errors.New("disk full")
}

func TestMiddlewareAnswers503WhenTheFenceFails(t *testing.T) {
	ran := false
	h := Middleware(brokenFence{}, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { ran = true }))
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPut, "/x", nil)
	req.Header.Set(Header, "5")
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusServiceUnavailable || ran || !strings.Contains(rec.Body.String(), `"code":"fence_unavailable"`) {
		t.Fatalf("status %d ran %v body %s", rec.Code, ran, rec.Body)
	}
}

// Two Fencing-Token headers: the fence would read one and the handler (or
// an upstream behind a proxy) might read the other.
func TestMiddlewareRefusesTwoTokens(t *testing.T) {
	g := NewGuard()
	ran := false
	h := Middleware(g, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { ran = true }))
	req := httptest.NewRequest(http.MethodPut, "/r", nil)
	req.Header.Add(Header, "9")
	req.Header.Add(Header, "3")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), `"invalid_token"`) || ran {
		t.Fatalf("%d %s ran=%v", rec.Code, rec.Body, ran)
	}
	if g.Highest("/r") != 0 {
		t.Fatalf("the mark rose to %d", g.Highest("/r"))
	}
}

// fencedPut sends one PUT /r through Middleware(f) with token and key
// headers ("" for none) and answers the status and the JSON body.
func fencedPut(t *testing.T, f Fence, token, key string) (int, map[string]any) {
	t.Helper()
	h := Middleware(f, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	req := httptest.NewRequest(http.MethodPut, "/r", nil)
	if token != "" {
		req.Header.Set(Header, token)
	}
	if key != "" {
		req.Header.Set(KeyHeader, key)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var m map[string]any
	_ = json.Unmarshal(rec.Body.Bytes(), &m)
	return rec.Code, m
}
