package main

import (
	"bufio"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path"
	"strings"
	"sync"
	"testing"
)

// normalisingUpstream is the kind of service a proxy is put in front of
// that reads a request's path or resource header loosely: it decodes
// every escape (%2F included), cleans the path (//, ., .., a trailing
// slash), lower-cases it, and takes the last of several resource headers.
// It records, per request, the resource it would apply the write to.
type normalisingUpstream struct {
	header string // the resource header, "" for the path
	mu     sync.Mutex
	seen   []string // "resource token"
}

func (u *normalisingUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var res string
	if u.header == "" {
		p, err := url.PathUnescape(r.URL.EscapedPath())
		if err != nil {
			p = r.URL.Path
		}
		res = path.Clean(p)
	} else if vs := r.Header.Values(u.header); len(vs) > 0 {
		res = vs[len(vs)-1]
	}
	u.mu.Lock()
	u.seen = append(u.seen, strings.ToLower(res)+" "+r.Header.Get("Fencing-Token"))
	u.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (u *normalisingUpstream) requests() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.seen...)
}

// rawRequest sends exactly target and lines (header lines) to addr, so
// that no client library cleans the path or merges headers on the way,
// and answers the status and the error code of the body.
func rawRequest(t *testing.T, addr, method, target string, lines ...string) proxyAnswer {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req := method + " " + target + " HTTP/1.1\r\nHost: " + addr + "\r\nContent-Length: 0\r\nConnection: close\r\n"
	for _, l := range lines {
		req += l + "\r\n"
	}
	if _, err := c.Write([]byte(req + "\r\n")); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	_, _ = bufio.NewReader(resp.Body).WriteTo(&b)
	return proxyAnswer{status: resp.StatusCode, body: b.String(), code: codeOf(b.String())}
}

// Finding 3 of issue 25: with token 6 honoured on /data/a, token 5 got
// through on every other spelling of the path, and an upstream that
// normalises paths applied it to /data/a.
func TestFenceProxyRefusesOtherSpellingsOfAPath(t *testing.T) {
	up := &normalisingUpstream{}
	upstream := httptest.NewServer(up)
	defer upstream.Close()
	proxy, _ := startProxy(t, t.TempDir(), upstream.URL, "path")
	addr := strings.TrimPrefix(proxy.URL, "http://")
	if got := rawRequest(t, addr, "PUT", "/data/a", "Fencing-Token: 6"); got.status != 204 {
		t.Fatalf("token 6 on /data/a: %d %s", got.status, got.body)
	}
	for _, target := range []string{
		"//data/a", "/data//a", "/data/./a", "/data/x/../a", "/data/a/", "/data/a%2F",
		"/data%2Fa", "/data/a%2f", "/data/%2e/a", "/data/x/%2E%2E/a", "/data/a/.", "/data\\a", "/data%5Ca",
	} {
		got := rawRequest(t, addr, "PUT", target, "Fencing-Token: 5")
		if got.status != http.StatusBadRequest || got.code != "noncanonical_path" {
			t.Errorf("token 5 on %s: %d %s, want 400 noncanonical_path", target, got.status, got.body)
		}
	}
	if got := up.requests(); len(got) != 1 || got[0] != "/data/a 6" {
		t.Fatalf("the upstream applied %q, want only token 6 on /data/a", got)
	}
}

// The variants above, but the proxy is told to map them: it fences on the
// cleaned path and forwards exactly that.
func TestFenceProxyCleanPathFencesAndForwardsTheCleanPath(t *testing.T) {
	up := &recordingUpstream{}
	upstream := httptest.NewServer(up)
	defer upstream.Close()
	proxy, _ := startProxy(t, t.TempDir(), upstream.URL, "path:clean")
	addr := strings.TrimPrefix(proxy.URL, "http://")
	if got := rawRequest(t, addr, "PUT", "/data/x/../a/", "Fencing-Token: 6"); got.status != 201 {
		t.Fatalf("token 6: %d %s", got.status, got.body)
	}
	for _, target := range []string{"/data/a", "//data/a", "/data//a", "/data/./a", "/data/a%2F", "/data%2Fa"} {
		if got := rawRequest(t, addr, "PUT", target, "Fencing-Token: 5"); got.code != "stale_token" {
			t.Errorf("token 5 on %s: %d %s, want stale_token", target, got.status, got.body)
		}
	}
	if got := rawRequest(t, addr, "PUT", "/data//b/", "Fencing-Token: 5"); got.status != 201 {
		t.Fatalf("token 5 on /data//b/: %d %s", got.status, got.body)
	}
	// An escape the path does not need is forwarded in the one escaping
	// of what was fenced.
	if got := rawRequest(t, addr, "PUT", "/data/%62", "Fencing-Token: 5"); got.status != 201 {
		t.Fatalf("token 5 on /data/%%62: %d %s", got.status, got.body)
	}
	want := []string{"PUT /data/a 6 ", "PUT /data/b 5 ", "PUT /data/b 5 "}
	if got := up.requests(); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("upstream saw %q, want %q", got, want)
	}
}

// In header mode the resource is the header: two of them, one named in
// Connection (so the proxy drops it on the way), an alias spelt with an
// underscore, or another case on a case-insensitive upstream got token 5
// past token 6.
func TestFenceProxyRefusesAmbiguousResourceHeaders(t *testing.T) {
	up := &normalisingUpstream{header: "X-Resource"}
	upstream := httptest.NewServer(up)
	defer upstream.Close()
	proxy, _ := startProxy(t, t.TempDir(), upstream.URL, "header:X-Resource")
	addr := strings.TrimPrefix(proxy.URL, "http://")
	if got := rawRequest(t, addr, "PUT", "/w", "Fencing-Token: 6", "X-Resource: acct"); got.status != 204 {
		t.Fatalf("token 6 on acct: %d %s", got.status, got.body)
	}
	for _, s := range []struct {
		name  string
		lines []string
		code  string
	}{
		{"two resource headers", []string{"X-Resource: junk", "X-Resource: acct"}, "duplicate_resource"},
		{"two resource headers, other case", []string{"X-Resource: junk", "x-resource: acct"}, "duplicate_resource"},
		{"an alias with an underscore", []string{"X-Resource: junk", "X_Resource: acct"}, "duplicate_resource"},
		{"the resource header named in Connection", []string{"X-Resource: junk", "Connection: X-Resource"}, "hop_by_hop_resource"},
		{"named in Connection among others", []string{"X-Resource: junk", "Connection: keep-alive, x-resource"}, "hop_by_hop_resource"},
		{"two tokens", []string{"X-Resource: acct", "Fencing-Token: 7"}, "invalid_token"},
	} {
		got := rawRequest(t, addr, "PUT", "/w", append([]string{"Fencing-Token: 5"}, s.lines...)...)
		if got.status != http.StatusBadRequest || got.code != s.code {
			t.Errorf("%s: %d %s, want 400 %s", s.name, got.status, got.body, s.code)
		}
	}
	if got := up.requests(); len(got) != 1 || got[0] != "acct 6" {
		t.Fatalf("the upstream applied %q, want only token 6 on acct", got)
	}
}

// --resource-case fold: for an upstream that does not tell ACCT from acct,
// the proxy does not either, and forwards the folded name it fenced on.
func TestFenceProxyResourceCaseFold(t *testing.T) {
	for _, from := range []string{"header:X-Resource", "path"} {
		t.Run(from, func(t *testing.T) {
			up := &normalisingUpstream{}
			if from != "path" {
				up.header = "X-Resource"
			}
			upstream := httptest.NewServer(up)
			defer upstream.Close()
			proxy, _ := startProxyWith(t, t.TempDir(), upstream.URL, proxyOptions{from: from, fold: true})
			addr := strings.TrimPrefix(proxy.URL, "http://")
			req := func(token, name string) proxyAnswer {
				if from == "path" {
					return rawRequest(t, addr, "PUT", "/"+name, "Fencing-Token: "+token)
				}
				return rawRequest(t, addr, "PUT", "/w", "Fencing-Token: "+token, "X-Resource: "+name)
			}
			if got := req("6", "acct"); got.status != 204 {
				t.Fatalf("token 6: %d %s", got.status, got.body)
			}
			if got := req("5", "ACCT"); got.code != "stale_token" {
				t.Fatalf("token 5 on ACCT: %d %s, want stale_token", got.status, got.body)
			}
			if got := req("7", "Acct"); got.status != 204 {
				t.Fatalf("token 7 on Acct: %d %s", got.status, got.body)
			}
		})
	}
}

func codeOf(body string) string {
	var m struct{ Code string }
	_ = json.Unmarshal([]byte(body), &m)
	return m.Code
}
