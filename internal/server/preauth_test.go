package server

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/framing"
)

// Nothing large before authentication, through Serve (issue 24, item 2):
// with ACLs on, a framed connection that named no principal is held to
// small frames; one whose token names a principal is not.
func TestFramedConnectionIsHeldSmallUntilItAuthenticates(t *testing.T) {
	addr := serveForTest(t, Config{})
	post := func(path, body, token string) (int, map[string]any) {
		req, err := http.NewRequest(http.MethodPost, "http://"+addr+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", api.ContentType)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		var resp *http.Response
		eventually(t, "an answer from the leader", func() bool {
			resp, err = http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode == http.StatusServiceUnavailable {
				resp.Body.Close()
				req.Body, _ = req.GetBody()
				return false
			}
			return true
		})
		defer resp.Body.Close()
		var m map[string]any
		json.NewDecoder(resp.Body).Decode(&m)
		return resp.StatusCode, m
	}
	st, m := post(api.PathACLBootstrap, "{}", "")
	admin, _ := m["secret"].(string)
	if st != 200 || admin == "" {
		t.Fatalf("bootstrap: %d %v", st, m)
	}
	// 20 KiB of key: refused as a key (400) once read, but too long a
	// frame for a connection that has not authenticated.
	body := []byte(`{"key":"` + strings.Repeat("k", 20<<10) + `","holder":"admin","ttl_ms":1000}`)
	dial := func() *framing.Conn {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := framing.Dial(ctx, addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	anon := dial()
	if st, _, err := anon.RoundTrip(ctx, http.MethodGet, api.PathHealth, nil); err != nil || st != 200 {
		t.Fatalf("health before authenticating: %d %v", st, err)
	}
	if st, b, err := anon.RoundTrip(ctx, http.MethodPost, api.PathAcquire, body); err == nil {
		t.Fatalf("a 20 KiB frame on an unauthenticated connection was answered %d %.80s", st, b)
	}

	wrong := dial()
	if err := wrong.Authorize("Bearer flk_not-a-token"); err != nil {
		t.Fatal(err)
	}
	if st, _, err := wrong.RoundTrip(ctx, http.MethodPost, api.PathAcquire, body); err == nil {
		t.Fatalf("a 20 KiB frame after an unknown token was answered %d", st)
	}

	authed := dial()
	if err := authed.Authorize("Bearer " + admin); err != nil {
		t.Fatal(err)
	}
	st, b, err := authed.RoundTrip(ctx, http.MethodPost, api.PathAcquire, body)
	if err != nil || st != http.StatusBadRequest || !bytes.Contains(b, []byte(api.CodeInvalid)) {
		t.Fatalf("a 20 KiB acquire after authenticating: %d %.120s %v, want the key refused as too long", st, b, err)
	}
}
