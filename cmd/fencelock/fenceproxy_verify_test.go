package main

import (
	"context"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/client/clienttest"
	"github.com/fencelock/fencelock/clock"
	"github.com/fencelock/fencelock/fence"
)

const forged = "18446744073709551615" // 2^64-1

// Findings 1 and 2 of issue 25 through fence-proxy: one request with a
// made-up token (even answered 502) or another key's live token raised the
// mark, and the real holder was refused from then on. Verifying with the
// real server, neither reaches the upstream or raises anything.
func TestFenceProxyVerifyRefusesForgedAndForeignTokens(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	srv := clienttest.NewServer(clk)
	defer srv.Close()
	c, err := client.New([]string{srv.Addr}, client.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = c.Grant(ctx, "store/first", "x", time.Minute, 0)
	a, _ := c.Grant(ctx, "store/v/a", "alice", time.Minute, 0)
	b, _ := c.Grant(ctx, "store/v/b", "bob", time.Minute, 0)
	tok := func(l client.Lock) string { return strconv.FormatUint(l.Token, 10) }

	up := &recordingUpstream{}
	upstream := httptest.NewServer(up)
	defer upstream.Close()
	for _, binding := range []string{"store{resource}", ""} {
		t.Run("lock-key="+binding, func(t *testing.T) {
			before := len(up.requests())
			dir := t.TempDir()
			bind := proxyBinding{firstUse: true} // --bind-on-first-use
			if binding != "" {
				bind = proxyBinding{keyMap: fence.KeyMap{"*": binding}}
			}
			proxy, _ := startProxyWith(t, dir, upstream.URL, proxyOptions{from: "path", verify: proxyVerification(client.NewVerifier(c), bind)})
			key := func(k string) []string {
				if binding != "" && k == "" {
					return nil
				}
				if k == "" {
					k = "store/v/a"
				}
				return []string{fence.KeyHeader, k}
			}
			for _, s := range []struct {
				name, token, key string
				status           int
				code             string
			}{
				{"forged", forged, "", 409, "unverified_token"},
				{"b's live token", tok(b), "", 409, "unverified_token"},
				{"a's live token", tok(a), "", 201, ""},
				// Unbound, b's key would have bound the resource to b: with
				// the binding recorded, the first verified request binds.
				{"b's live token naming b", tok(b), "store/v/b", 409, "wrong_key"},
				{"the forged token after a's", forged, "", 409, "unverified_token"},
				{"a's again", tok(a), "", 201, ""},
			} {
				got := send(t, "PUT", proxy.URL+"/v/a", s.token, s.name, key(s.key)...)
				if got.status != s.status || got.code != s.code {
					t.Fatalf("%s: %d %s, want %d %s", s.name, got.status, got.body, s.status, s.code)
				}
			}
			if got := up.requests()[before:]; len(got) != 2 || !strings.HasPrefix(got[0], "PUT /v/a "+tok(a)) {
				t.Fatalf("upstream saw %q", got)
			}
			if got := send(t, "PUT", proxy.URL+"/v/a", forged, "x", key("")...); !strings.Contains(got.body, `"issued":`) || !strings.Contains(got.body, "never issued") {
				t.Fatalf("the refusal of a forged token says so: %s", got.body)
			}
		})
	}
}

// The same with real processes: fencelock server, and fence-proxy
// --verify on it.
func TestFenceProxyVerifyProcess(t *testing.T) {
	addr := freeAddr(t)
	startProc(t, t.TempDir(), nil, "--listen", addr, "--data", t.TempDir()).waitReady(addr)
	acquire := func(key string) string {
		r := mustCall(t, addr, "POST", "/v1/acquire", `{"key":"`+key+`","holder":"h","ttl_ms":60000}`)
		return strconv.FormatUint(token(r), 10)
	}
	a, b := acquire("store/v/a"), acquire("store/v/b")
	up := &recordingUpstream{}
	upstream := httptest.NewServer(up)
	defer upstream.Close()
	_, proxy := startProxyProcess(t, upstream.URL, t.TempDir(), "--verify", addr, "--lock-key", "store{resource}")
	for _, s := range []struct {
		token  string
		status int
		code   string
	}{{forged, 409, "unverified_token"}, {b, 409, "unverified_token"}, {a, 201, ""}, {b, 409, "unverified_token"}} {
		if got := send(t, "PUT", proxy+"/v/a", s.token, "x"); got.status != s.status || got.code != s.code {
			t.Fatalf("token %s: %d %s", s.token, got.status, got.body)
		}
	}
	if got := up.requests(); len(got) != 1 || got[0] != "PUT /v/a "+a+" x" {
		t.Fatalf("upstream saw %q", got)
	}
}

// Finding 2 of issue 43 through the proxy: with --verify and no --lock-key,
// b's live token sent with Fencing-Key naming b's key to a fresh resource
// was forwarded and bound the resource to b, and a's holder then got
// wrong_key until a reset. --verify now needs a binding (or
// --bind-on-first-use, said out loud); a resource its key map does not
// bind is refused, whatever key the request names.
func TestFenceProxyVerifyFirstUseHijack(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	srv := clienttest.NewServer(clk)
	defer srv.Close()
	c, err := client.New([]string{srv.Addr}, client.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a, _ := c.Grant(ctx, "store/v/a", "alice", time.Minute, 0)
	b, _ := c.Grant(ctx, "store/v/b", "bob", time.Minute, 0)
	up := &recordingUpstream{}
	upstream := httptest.NewServer(up)
	defer upstream.Close()
	km, _ := fence.ParseKeyMap("/v/a=store/v/a", "/v/b=store/v/b")
	proxy, _ := startProxyWith(t, t.TempDir(), upstream.URL, proxyOptions{from: "path", verify: proxyVerification(client.NewVerifier(c), proxyBinding{keyMap: km})})
	tok := func(l client.Lock) string { return strconv.FormatUint(l.Token, 10) }
	for _, s := range []struct {
		path, token, key string
		status           int
		code             string
	}{
		{"/v/a", tok(b), "store/v/b", 409, "wrong_key"},          // fresh, but bound by configuration
		{"/fresh", tok(b), "store/v/b", 409, "unbound_resource"}, // bound by nothing: not by the request either
		{"/v/a", tok(a), "store/v/a", 201, ""},
		{"/v/a", tok(a), "", 201, ""},
	} {
		if got := send(t, "PUT", proxy.URL+s.path, s.token, "x", fence.KeyHeader, s.key); got.status != s.status || got.code != s.code {
			t.Fatalf("token %s naming %q on %s: %d %s, want %d %s", s.token, s.key, s.path, got.status, got.body, s.status, s.code)
		}
	}
	if got := up.requests(); len(got) != 2 {
		t.Fatalf("upstream saw %q", got)
	}
	// The binding comes from the command line, or first use is asked for.
	for _, args := range [][]string{
		{"--verify", "127.0.0.1:1"},
		{"--verify", "127.0.0.1:1", "--key-map", "/v/*"},
		{"--verify", "127.0.0.1:1", "--key-map", "*=a", "--lock-key", "b"},
		{"--bind-on-first-use"},
		{"--key-map", "/v/*=k"},
		{"--verify", "127.0.0.1:1", "--lock-key", "k", "--verify-timeout", "0s"},
	} {
		_, errs, code := runCLI(t, "", append([]string{"fence-proxy", "--upstream", "http://127.0.0.1:1", "--state", t.TempDir()}, args...)...)
		if code != exitUsage {
			t.Fatalf("%q: exit %d %q", args, code, errs)
		}
	}
}
