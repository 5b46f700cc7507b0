package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencelock/fencelock/fence"
	"github.com/fencelock/fencelock/fence/filefence"
)

// recordingUpstream is the service behind the proxy: it records every
// request that reached it.
type recordingUpstream struct {
	mu   sync.Mutex
	seen []string // "METHOD PATH token body", the path as escaped on the wire
}

func (u *recordingUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	u.mu.Lock()
	u.seen = append(u.seen, r.Method+" "+r.URL.EscapedPath()+" "+r.Header.Get(fence.Header)+" "+string(b))
	u.mu.Unlock()
	w.WriteHeader(http.StatusCreated)
	io.WriteString(w, "stored")
}

func (u *recordingUpstream) requests() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.seen...)
}

// proxyOptions are the flags of a proxy a test starts in-process.
type proxyOptions struct {
	from         string // --resource-from
	fold         bool   // --resource-case fold
	pass         []string
	reads        []string            // --read-methods
	verify       *fence.Verification // --verify
	override     string              // --method-override
	maxResource  int                 // --max-resource
	allowUpgrade bool                // --allow-upgrade
	// --upstream-timeout (0: none)
	upstreamTimeout time.Duration
}

// startProxy runs the proxy in-process on a file fence in dir.
func startProxy(t *testing.T, dir, upstream, from string, pass ...string) (*httptest.Server, func()) {
	t.Helper()
	return startProxyWith(t, dir, upstream, proxyOptions{from: from, pass: pass})
}

func startProxyWith(t *testing.T, dir, upstream string, o proxyOptions) (*httptest.Server, func()) {
	t.Helper()
	var opts []filefence.Option
	if o.verify != nil {
		opts = append(opts, filefence.WithVerification(o.verify))
	}
	ff, err := filefence.Open(dir, opts...)
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(upstream)
	caseMode := "exact"
	if o.fold {
		caseMode = "fold"
	}
	res, err := parseResourceFrom(o.from, caseMode)
	if err != nil {
		t.Fatal(err)
	}
	res.maxLen = o.maxResource
	cfg := proxyConfig{upstream: u, resource: res, pass: o.pass, reads: o.reads, allowUpgrade: o.allowUpgrade, upstreamTimeout: o.upstreamTimeout}
	if o.override != "" {
		cfg.override = http.CanonicalHeaderKey(o.override)
	}
	srv := httptest.NewServer(newFenceProxy(ff, cfg))
	stop := func() { srv.Close(); ff.Close() }
	t.Cleanup(stop)
	return srv, stop
}

type proxyAnswer struct {
	status int
	body   string
	code   string
}

func send(t *testing.T, method, url, token, body string, hdr ...string) proxyAnswer {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	if token != "" {
		req.Header.Set(fence.Header, token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m struct{ Code string }
	_ = json.Unmarshal(b, &m)
	return proxyAnswer{resp.StatusCode, string(b), m.Code}
}

func TestFenceProxy(t *testing.T) {
	up := &recordingUpstream{}
	upstream := httptest.NewServer(up)
	defer upstream.Close()
	proxy, _ := startProxy(t, t.TempDir(), upstream.URL, "path", http.MethodGet)

	for _, s := range []struct {
		name, method, path, token string
		status                    int
		code                      string
		reaches                   bool
	}{
		{"new resource: first token passes", "PUT", "/v/a", "7", 201, "", true},
		{"equal token passes", "PUT", "/v/a", "7", 201, "", true},
		{"lower token is refused", "PUT", "/v/a", "6", 409, "stale_token", false},
		{"higher token passes", "PUT", "/v/a", "9", 201, "", true},
		{"the old token is now stale", "POST", "/v/a", "7", 409, "stale_token", false},
		{"no token is refused", "PUT", "/v/a", "", 409, "missing_token", false},
		{"a bad token is refused", "PUT", "/v/a", "x", 400, "invalid_token", false},
		{"another path is another resource", "PUT", "/v/b", "3", 201, "", true},
		{"a passed method goes through without a token", "GET", "/v/a", "", 201, "", true},
	} {
		before := len(up.requests())
		got := send(t, s.method, proxy.URL+s.path, s.token, s.name)
		if got.status != s.status || got.code != s.code {
			t.Fatalf("%s: %d %q, want %d %q (%s)", s.name, got.status, got.code, s.status, s.code, got.body)
		}
		reached := len(up.requests()) > before
		if reached != s.reaches {
			t.Fatalf("%s: reached upstream %v, want %v", s.name, reached, s.reaches)
		}
	}
	got := send(t, "PUT", proxy.URL+"/v/a", "8", "x")
	if !strings.Contains(got.body, `"token":8`) || !strings.Contains(got.body, `"highest":9`) {
		t.Fatalf("stale answer %s does not name both tokens", got.body)
	}
}

func TestFenceProxyRestartStillRefusesTheStaleToken(t *testing.T) {
	up := &recordingUpstream{}
	upstream := httptest.NewServer(up)
	defer upstream.Close()
	dir := t.TempDir()
	proxy, stop := startProxy(t, dir, upstream.URL, "path")
	if got := send(t, "PUT", proxy.URL+"/v/a", "7", "B"); got.status != 201 {
		t.Fatalf("first write %d", got.status)
	}
	stop()
	proxy, _ = startProxy(t, dir, upstream.URL, "path")
	if got := send(t, "PUT", proxy.URL+"/v/a", "6", "A-stale"); got.status != 409 || got.code != "stale_token" {
		t.Fatalf("stale write after restart: %d %s", got.status, got.body)
	}
	if got := send(t, "PUT", proxy.URL+"/v/a", "7", "B1"); got.status != 201 {
		t.Fatalf("current holder after restart: %d %s", got.status, got.body)
	}
	want := []string{"PUT /v/a 7 B", "PUT /v/a 7 B1"}
	if got := up.requests(); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("upstream saw %q, want %q", got, want)
	}
}

func TestFenceProxyResourceFromHeader(t *testing.T) {
	up := &recordingUpstream{}
	upstream := httptest.NewServer(up)
	defer upstream.Close()
	proxy, _ := startProxy(t, t.TempDir(), upstream.URL, "header:X-Account")
	if got := send(t, "PUT", proxy.URL+"/one", "5", "", "X-Account", "acme"); got.status != 201 {
		t.Fatalf("first: %d %s", got.status, got.body)
	}
	// Another path, same account: same resource, so 4 is stale.
	if got := send(t, "PUT", proxy.URL+"/two", "4", "", "X-Account", "acme"); got.code != "stale_token" {
		t.Fatalf("same account, older token: %d %s", got.status, got.body)
	}
	if got := send(t, "PUT", proxy.URL+"/two", "4", "", "X-Account", "other"); got.status != 201 {
		t.Fatalf("another account: %d %s", got.status, got.body)
	}
	if got := send(t, "PUT", proxy.URL+"/two", "9", ""); got.status != 400 || got.code != "missing_resource" {
		t.Fatalf("no resource header: %d %s", got.status, got.body)
	}
	if n := len(up.requests()); n != 2 {
		t.Fatalf("upstream saw %d requests, want 2", n)
	}
}

func TestFenceProxyUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"fence-proxy", "--state", "x"},
		{"fence-proxy", "--upstream", "http://127.0.0.1:1"},
		{"fence-proxy", "--upstream", "ftp://x", "--state", "x"},
		{"fence-proxy", "--upstream", "http://127.0.0.1:1", "--state", "x", "--resource-from", "query"},
		{"fence-proxy", "--upstream", "http://127.0.0.1:1", "--state", "x", "extra"},
		{"fence-proxy", "--upstream", "http://127.0.0.1:1", "--state", "x", "--resource-from", "header:Connection"},
		{"fence-proxy", "--upstream", "http://127.0.0.1:1", "--state", "x", "--resource-from", "header:fencing-token"},
		{"fence-proxy", "--upstream", "http://127.0.0.1:1", "--state", "x", "--resource-from", "header:Transfer_Encoding"},
		{"fence-proxy", "--upstream", "http://127.0.0.1:1", "--state", "x", "--resource-from", "header:X Y"},
		{"fence-proxy", "--upstream", "http://127.0.0.1:1", "--state", "x", "--resource-case", "upper"},
		{"fence-proxy", "--upstream", "http://127.0.0.1:1", "--state", "x", "--lock-key", "k/{resource}"},
		{"fence-proxy", "--upstream", "http://127.0.0.1:1", "--state", "x", "--pass", "GET", "--read-methods", "get,HEAD"},
	} {
		var stderr strings.Builder
		e := &env{stdin: strings.NewReader(""), stdout: io.Discard, stderr: &stderr, getenv: func(string) string { return "" }}
		code := exitCode(e, run(t.Context(), e, args))
		lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
		if code != exitUsage || len(lines) != 2 || !strings.HasPrefix(lines[0], "fencelock: fence-proxy: ") {
			t.Fatalf("%q: exit %d, stderr %q", args, code, stderr.String())
		}
	}
}

// startProxyProcess starts the fence-proxy binary on a free port in front
// of upstream with marks in state, and answers it and its URL once it
// says where it listens.
func startProxyProcess(t *testing.T, upstream, state string, extra ...string) (*exec.Cmd, string) {
	t.Helper()
	cmd, addr, _ := startProxyProcessLogs(t, upstream, state, extra...)
	return cmd, addr
}

// startProxyProcessLogs is startProxyProcess answering its stderr too.
func startProxyProcessLogs(t *testing.T, upstream, state string, extra ...string) (*exec.Cmd, string, *syncBuffer) {
	t.Helper()
	args := append([]string{"fence-proxy", "--listen", "127.0.0.1:0", "--upstream", upstream, "--state", state}, extra...)
	cmd := exec.Command(fencelockBinary(t), args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("fence-proxy said nothing: %v %s", err, stderr.String())
	}
	_, rest, ok := strings.Cut(line, "listening on ")
	if !ok {
		t.Fatalf("unexpected first line %q", line)
	}
	return cmd, strings.TrimSuffix(strings.Fields(rest)[0], ","), stderr
}

// The real binary: a proxy process is stopped and started again on the
// same --state, and the stale token is still refused.
func TestFenceProxyProcess(t *testing.T) {
	up := &recordingUpstream{}
	upstream := httptest.NewServer(up)
	defer upstream.Close()
	state := t.TempDir()
	start := func() (string, *exec.Cmd) {
		cmd, addr := startProxyProcess(t, upstream.URL, state)
		return addr, cmd
	}
	stop := func(cmd *exec.Cmd) {
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("fence-proxy exit: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("fence-proxy did not stop on SIGTERM")
		}
	}
	addr, cmd := start()
	if got := send(t, "PUT", addr+"/v/a", "7", "B"); got.status != 201 {
		t.Fatalf("first write %d %s", got.status, got.body)
	}
	stop(cmd)
	addr, cmd = start()
	if got := send(t, "PUT", addr+"/v/a", "6", "A-stale"); got.status != 409 || got.code != "stale_token" {
		t.Fatalf("stale write through a restarted proxy: %d %s", got.status, got.body)
	}
	stop(cmd)
	if got := up.requests(); len(got) != 1 || got[0] != "PUT /v/a 7 B" {
		t.Fatalf("upstream saw %q", got)
	}
}

// Finding 7 of issue 25 at the proxy: with GET fenced as a write, reader 5
// was refused after reader 6 of the same read hold; with GET passed, a
// reader from before the last write got through. --read-methods fences
// reads by the read rule, across a restart.
func TestFenceProxyReadMethods(t *testing.T) {
	up := &recordingUpstream{}
	upstream := httptest.NewServer(up)
	defer upstream.Close()
	dir := t.TempDir()
	proxy, stop := startProxyWith(t, dir, upstream.URL, proxyOptions{from: "path", reads: []string{"GET", "HEAD"}})
	steps := []struct {
		method, token string
		status        int
		code          string
	}{
		{"PUT", "5", 201, ""},             // writer 5
		{"GET", "4", 409, "stale_token"},  // a reader from before writer 5
		{"GET", "7", 201, ""},             // reader 7
		{"GET", "6", 201, ""},             // reader 6, granted with 7
		{"GET", "", 409, "missing_token"}, // reads are fenced, not waved through
		{"PUT", "6", 409, "stale_token"},  // a writer below reader 7
		{"PUT", "8", 201, ""},             // writer 8
		{"HEAD", "7", 409, ""},            // reader 7 after writer 8 (a HEAD answer has no body)
		{"GET", "9", 201, ""},             // reader 9
	}
	for i, s := range steps {
		if i == 5 {
			stop() // a restart in the middle: both marks are on disk
			proxy, stop = startProxyWith(t, dir, upstream.URL, proxyOptions{from: "path", reads: []string{"GET", "HEAD"}})
		}
		got := send(t, s.method, proxy.URL+"/v/doc", s.token, "")
		if got.status != s.status || got.code != s.code {
			t.Fatalf("%s with token %q: %d %s, want %d %s", s.method, s.token, got.status, got.body, s.status, s.code)
		}
	}
}

// The mark is raised before forwarding: a newer token whose request failed
// upstream still makes the older one stale.
func TestFenceProxyRaisesTheMarkBeforeForwarding(t *testing.T) {
	upstream := httptest.NewServer(http.NotFoundHandler())
	upstream.Close() // nothing listens there now
	proxy, _ := startProxy(t, t.TempDir(), upstream.URL, "path")
	if got := send(t, "PUT", proxy.URL+"/v/a", "9", "B"); got.status != 502 || got.code != "upstream_unreachable" {
		t.Fatalf("unreachable upstream: %d %s", got.status, got.body)
	}
	if got := send(t, "PUT", proxy.URL+"/v/a", "8", "A"); got.code != "stale_token" {
		t.Fatalf("older token after a failed newer request: %d %s", got.status, got.body)
	}
}

// BenchmarkFenceProxy is one PUT per iteration straight to the upstream
// and through the proxy, with the same token (no disk write: the mark is
// already there) and with a rising token (one fsynced rewrite of the marks
// file per request). plain-reverse-proxy is httputil.ReverseProxy with no
// fence: the extra hop alone.
func BenchmarkFenceProxy(b *testing.B) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer upstream.Close()
	ff, err := filefence.Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer ff.Close()
	u, _ := url.Parse(upstream.URL)
	proxy := httptest.NewServer(newFenceProxy(ff, proxyConfig{upstream: u}))
	defer proxy.Close()
	plain := httptest.NewServer(&httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(u) }})
	defer plain.Close()
	do := func(b *testing.B, base string, token uint64) {
		req, _ := http.NewRequest(http.MethodPut, base+"/v/a", strings.NewReader("value"))
		req.Header.Set(fence.Header, strconv.FormatUint(token, 10))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
	b.Run("direct", func(b *testing.B) {
		for b.Loop() {
			do(b, upstream.URL, 1)
		}
	})
	b.Run("plain-reverse-proxy", func(b *testing.B) {
		for b.Loop() {
			do(b, plain.URL, 1)
		}
	})
	b.Run("proxy-same-token", func(b *testing.B) {
		do(b, proxy.URL, 1<<40)
		for b.Loop() {
			do(b, proxy.URL, 1<<40)
		}
	})
	var tok uint64 = 1 << 41
	b.Run("proxy-rising-token", func(b *testing.B) {
		for b.Loop() {
			tok++
			do(b, proxy.URL, tok)
		}
	})
}

// seedMarks writes a version-1 marks file of n resources into dir (the
// fence reads it and compacts it into its own format at Open).
func seedMarks(b *testing.B, dir string, n int) {
	b.Helper()
	var buf strings.Builder
	buf.WriteString("fencelock filefence v1\n")
	for i := range n {
		fmt.Fprintf(&buf, "%d %q\n", i+1, fmt.Sprintf("/v/seeded-%07d", i))
	}
	body := buf.String()
	data := body + fmt.Sprintf("crc32c %08x\n", crc32.Checksum([]byte(body), crc32.MakeTable(crc32.Castagnoli)))
	if err := os.WriteFile(filepath.Join(dir, filefence.FileName), []byte(data), 0o644); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkFenceProxyNewResource is one PUT per iteration to a resource
// the proxy has not seen, on a --state already holding 0, 3,000 or
// 100,000 marks: the case that slowed from 122 to 49 requests/s at 3,000
// when every new resource rewrote the whole marks file.
func BenchmarkFenceProxyNewResource(b *testing.B) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer upstream.Close()
	u, _ := url.Parse(upstream.URL)
	for _, n := range []int{0, 3_000, 100_000} {
		b.Run(fmt.Sprintf("marks=%d", n), func(b *testing.B) {
			dir := b.TempDir()
			seedMarks(b, dir, n)
			ff, err := filefence.Open(dir)
			if err != nil {
				b.Fatal(err)
			}
			defer ff.Close()
			proxy := httptest.NewServer(newFenceProxy(ff, proxyConfig{upstream: u}))
			defer proxy.Close()
			i := 0
			for b.Loop() {
				i++
				req, _ := http.NewRequest(http.MethodPut, fmt.Sprintf("%s/v/new-%d", proxy.URL, i), strings.NewReader("value"))
				req.Header.Set(fence.Header, strconv.Itoa(n+i))
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusNoContent {
					b.Fatalf("status %d", resp.StatusCode)
				}
			}
		})
	}
}
