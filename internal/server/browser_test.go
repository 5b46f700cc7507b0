package server

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/tlsconfig"
	"github.com/fencelock/fencelock/internal/tlsconfig/tlstest"
)

// Browsers cannot drive the API from another site (issue 24, item 6).

// raw sends a request with exactly the headers given (Host among them)
// and answers the status and the error code, if any.
func (ts *testServer) raw(method, path, body string, header map[string]string) (int, string) {
	ts.t.Helper()
	req, err := http.NewRequest(method, ts.url+path, strings.NewReader(body))
	if err != nil {
		ts.t.Fatal(err)
	}
	for k, v := range header {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		ts.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var e api.Error
	json.Unmarshal(b, &e)
	return resp.StatusCode, e.Code
}

// What a page on another site can send without a CORS preflight: a
// text/plain (or form, or untyped) POST. It released alice's lock.
func TestCrossSiteSimpleRequestsChangeNothing(t *testing.T) {
	ts := startServer(t, fastConfig(""))
	if a := ts.post(api.PathAcquire, `{"key":"a/victim","holder":"alice","ttl_ms":600000}`); a.status != 200 {
		t.Fatalf("acquire: %d %v", a.status, a.body)
	}
	release := `{"key":"a/victim","holder":"alice","token":1}`
	for name, c := range map[string]struct {
		header map[string]string
		code   string
	}{
		"text/plain from another site":     {map[string]string{"Content-Type": "text/plain", "Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}, api.CodeUnsupportedMediaType},
		"a form from another site":         {map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Origin": "https://evil.example"}, api.CodeUnsupportedMediaType},
		"text/plain, no Origin":            {map[string]string{"Content-Type": "text/plain"}, api.CodeUnsupportedMediaType},
		"no Content-Type":                  {map[string]string{}, api.CodeUnsupportedMediaType},
		"JSON from another site (Origin)":  {map[string]string{"Content-Type": "application/json", "Origin": "https://evil.example"}, api.CodeCrossSite},
		"JSON, Sec-Fetch-Site cross-site":  {map[string]string{"Content-Type": "application/json", "Sec-Fetch-Site": "cross-site"}, api.CodeCrossSite},
		"JSON, Sec-Fetch-Site same-site":   {map[string]string{"Content-Type": "application/json", "Sec-Fetch-Site": "same-site", "Origin": "http://localhost:3000"}, api.CodeCrossSite},
		"JSON from a page on another port": {map[string]string{"Content-Type": "application/json", "Origin": "http://127.0.0.1:1"}, api.CodeCrossSite},
	} {
		if st, code := ts.raw(http.MethodPost, api.PathRelease, release, c.header); code != c.code || st != api.Status(c.code) {
			t.Errorf("%s: %d %q, want %d %s", name, st, code, api.Status(c.code), c.code)
		}
	}
	if ls, ok := ts.fsm.Get("a/victim", ts.fsm.Now()); !ok || ls.Holder != "alice" {
		t.Fatalf("after the cross-site requests the lease is %+v, held %v; want alice's", ls, ok)
	}
	// The same release, as the CLI, the Go client or a same-origin page
	// send it, goes through.
	host := strings.TrimPrefix(ts.url, "http://")
	for name, h := range map[string]map[string]string{
		"a client":              {"Content-Type": "application/json"},
		"a same-origin page":    {"Content-Type": "application/json; charset=utf-8", "Origin": ts.url, "Sec-Fetch-Site": "same-origin"},
		"a typed-in URL (none)": {"Content-Type": "application/json", "Sec-Fetch-Site": "none", "Host": host},
	} {
		if st, code := ts.raw(http.MethodPost, api.PathAcquire, `{"key":"ok/`+strings.ReplaceAll(name, " ", "-")+`","holder":"h","ttl_ms":1000}`, h); st != 200 {
			t.Errorf("%s: %d %s", name, st, code)
		}
	}
}

// A page that rebinds its own name to the server's address (DNS
// rebinding) sends its name as Host: every lock and the overview were
// read with Host: evil.example.
func TestRequestsForAnotherHostAreRefused(t *testing.T) {
	ts := startServer(t, fastConfig(""))
	port := ts.url[strings.LastIndexByte(ts.url, ':')+1:]
	for _, host := range []string{"evil.example", "evil.example:" + port, "fencelock.evil.example:" + port} {
		for _, path := range []string{api.PathLocks, api.PathOverview, "/ui/", api.PathMetrics} {
			if st, code := ts.raw(http.MethodGet, path, "", map[string]string{"Host": host}); st != 403 || code != api.CodeHostNotAllowed {
				t.Errorf("GET %s with Host %s: %d %q, want 403 %s", path, host, st, code, api.CodeHostNotAllowed)
			}
		}
	}
	for _, host := range []string{"localhost:" + port, "127.0.0.1:" + port, "[::1]:" + port, "LOCALHOST", "localhost."} {
		if st, code := ts.raw(http.MethodGet, api.PathLocks, "", map[string]string{"Host": host}); st != 200 {
			t.Errorf("GET /v1/locks with Host %s: %d %s", host, st, code)
		}
	}
}

// The names a Host may carry: the advertised one, --allowed-host, the
// certificate's, loopback names and IP addresses; "*" takes any.
func TestHostCheck(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	f := tlstest.Write(t, t.TempDir(), "n1", ca, ca.IssueTemplate(t, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "n1"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:    []string{"n1.cluster.example", "*.nodes.example"},
	}))
	r, err := tlsconfig.Load(tlsconfig.Files{CertFile: f.Cert, KeyFile: f.Key, CAFile: f.CA})
	if err != nil {
		t.Fatal(err)
	}
	check := hostCheck(Config{ClientAddr: "fl.internal:7470", AllowedHosts: []string{"Extra.Example"}}, r)
	for host, want := range map[string]bool{
		"fl.internal:7470": true, "FL.INTERNAL": true, "extra.example": true, "extra.example.:80": true,
		"n1.cluster.example": true, "a.nodes.example:7470": true, "a.b.nodes.example": false, "nodes.example": false,
		"localhost": true, "app.localhost:1": true, "127.0.0.1:7470": true, "[::1]:7470": true, "10.1.2.3": true, "": true,
		"evil.example": false, "fl.internal.evil.example": false, "localhost.evil.example": false,
	} {
		if got := check(host); got != want {
			t.Errorf("Host %q: allowed %v, want %v", host, got, want)
		}
	}
	if hostCheck(Config{AllowedHosts: []string{"*"}}, nil) != nil {
		t.Error(`--allowed-host "*" still checks`)
	}
}

// A name given with AllowedHosts reaches the server; the dashboard is
// served under it.
func TestAllowedHostIsServed(t *testing.T) {
	cfg := fastConfig("")
	cfg.AllowedHosts = []string{"fencelock.internal"}
	ts := startServer(t, cfg)
	for _, path := range []string{api.PathLocks, "/ui/"} {
		if st, code := ts.raw(http.MethodGet, path, "", map[string]string{"Host": "fencelock.internal:7470"}); st != 200 {
			t.Errorf("GET %s with an allowed Host: %d %s", path, st, code)
		}
	}
	if st, _ := ts.raw(http.MethodGet, api.PathLocks, "", map[string]string{"Host": "other.internal"}); st != 403 {
		t.Errorf("another name: %d", st)
	}
}
