package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencelock/fencelock/internal/testports"
)

// proc is a running `fencelock server`.
type proc struct {
	t      *testing.T
	cmd    *exec.Cmd
	addr   string
	stderr *syncBuffer
	done   chan struct{}
	err    error
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// freeAddr is a loopback address for a process a test starts
// (internal/testports: none the kernel may give to another socket first).
func freeAddr(t *testing.T) string {
	t.Helper()
	return testports.Loopback(t)
}

// startProc starts the server binary with args in dir and waits, bounded,
// until /readyz answers 200.
func startProc(t *testing.T, dir string, env []string, args ...string) *proc {
	t.Helper()
	return startProcVia(t, dir, env, nil, args...)
}

// startProcVia is startProc with the server started through via, a command
// that ends by exec'ing its arguments (say sh -c 'ulimit -n 200; exec "$@"' sh):
// the process is the server's own.
func startProcVia(t *testing.T, dir string, env, via []string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, stderr: &syncBuffer{}, done: make(chan struct{})}
	argv := append(append(append([]string{}, via...), fencelockBinary(t), "server"), args...)
	p.cmd = exec.Command(argv[0], argv[1:]...)
	p.cmd.Dir = dir
	p.cmd.Env = append(os.Environ(), withClusterSecret(env, args)...)
	p.cmd.Stderr = p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("server stderr:\n%s", p.stderr.String())
		}
	})
	return p
}

// withClusterSecret adds the tests' cluster secret to the environment of
// a server started with args, unless env or args say otherwise (a secret
// of their own, none, or --insecure-raft).
func withClusterSecret(env, args []string) []string {
	for _, v := range env {
		if strings.HasPrefix(v, "FENCELOCK_CLUSTER_SECRET_FILE=") {
			return env
		}
	}
	for _, a := range args {
		if strings.HasPrefix(a, "--cluster-secret-file") || strings.HasPrefix(a, "--insecure-raft") {
			return env
		}
	}
	return append(append([]string{}, env...), "FENCELOCK_CLUSTER_SECRET_FILE="+testSecretFile)
}

func (p *proc) waitReady(addr string) {
	p.t.Helper()
	p.addr = addr
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-p.done:
			p.t.Fatalf("server exited before ready: %v\n%s", p.err, p.stderr.String())
		default:
		}
		resp, err := http.Get("http://" + addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("server not ready at %s: %v\n%s", addr, err, p.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// exitCode waits, bounded, for the process to end and returns its status.
func (p *proc) exitCode() int {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		p.t.Fatal("server did not exit")
	}
	var xe *exec.ExitError
	if errors.As(p.err, &xe) {
		return xe.ExitCode()
	}
	if p.err != nil {
		p.t.Fatal(p.err)
	}
	return 0
}

var httpClient = &http.Client{Timeout: 30 * time.Second}

type reply struct {
	status int
	body   map[string]any
}

func call(addr, method, path, body string) (reply, error) {
	req, err := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
	if err != nil {
		return reply{}, err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json") // what every client sends with a body
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return reply{}, err
	}
	r := reply{status: resp.StatusCode}
	if err := json.Unmarshal(raw, &r.body); err != nil {
		return reply{}, fmt.Errorf("%s %s: %d %q", method, path, resp.StatusCode, raw)
	}
	return r, nil
}

func mustCall(t *testing.T, addr, method, path, body string) reply {
	t.Helper()
	r, err := call(addr, method, path, body)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func token(r reply) uint64 {
	f, _ := r.body["token"].(float64)
	return uint64(f)
}

func TestServerProcessAcquireExtendReleaseCheck(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	addr := freeAddr(t)
	p := startProc(t, dir, nil, "--listen", addr, "--data", filepath.Join(dir, "data"))
	p.waitReady(addr)

	a := mustCall(t, addr, "POST", "/v1/acquire", `{"key":"jobs/nightly","holder":"alice","ttl_ms":10000}`)
	if a.status != 200 || token(a) != 1 || a.body["holder"] != "alice" {
		t.Fatalf("acquire: %+v", a)
	}
	if r := mustCall(t, addr, "POST", "/v1/acquire", `{"key":"jobs/nightly","holder":"bob","ttl_ms":10000}`); r.status != 409 || r.body["code"] != "held" {
		t.Fatalf("acquire by bob: %+v", r)
	}
	if r := mustCall(t, addr, "POST", "/v1/extend", `{"key":"jobs/nightly","holder":"alice","token":1,"ttl_ms":20000}`); r.status != 200 || token(r) != 1 {
		t.Fatalf("extend: %+v", r)
	}
	if r := mustCall(t, addr, "GET", "/v1/check?key=jobs/nightly&token=1", ""); r.body["valid"] != true {
		t.Fatalf("check: %+v", r)
	}
	if r := mustCall(t, addr, "POST", "/v1/release", `{"key":"jobs/nightly","holder":"alice","token":1}`); r.body["released"] != true {
		t.Fatalf("release: %+v", r)
	}
	if r := mustCall(t, addr, "GET", "/v1/check?key=jobs/nightly&token=1", ""); r.body["valid"] != false {
		t.Fatalf("check after release: %+v", r)
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.exitCode(); code != 0 {
		t.Fatalf("exit status %d after SIGTERM", code)
	}
}

func TestServerProcessDefaultsAndEnv(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// The environment names the address; --data is absent, so the data
	// lives in ./fencelock-data of the working directory.
	addr := freeAddr(t)
	p := startProc(t, dir, []string{"FENCELOCK_LISTEN=" + addr, "FENCELOCK_DATA="})
	p.waitReady(addr)
	if _, err := os.Stat(filepath.Join(dir, "fencelock-data", "LOCK")); err != nil {
		t.Fatalf("default data dir: %v", err)
	}
	p.cmd.Process.Signal(syscall.SIGINT)
	if code := p.exitCode(); code != 0 {
		t.Fatalf("exit status %d after SIGINT", code)
	}

	// A flag beats the environment.
	flagAddr := freeAddr(t)
	p = startProc(t, dir, []string{"FENCELOCK_LISTEN=" + freeAddr(t), "FENCELOCK_DATA=" + filepath.Join(dir, "env-data")},
		"--listen", flagAddr)
	p.waitReady(flagAddr)
	if _, err := os.Stat(filepath.Join(dir, "env-data", "LOCK")); err != nil {
		t.Fatalf("FENCELOCK_DATA ignored: %v", err)
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.exitCode(); code != 0 {
		t.Fatalf("exit status %d", code)
	}
}

func TestServerProcessBadFlagExits2(t *testing.T) {
	t.Parallel()
	p := startProc(t, t.TempDir(), nil, "--no-such-flag")
	if code := p.exitCode(); code != 2 {
		t.Fatalf("exit status %d, want 2", code)
	}
}

// A waiter in flight at SIGTERM is answered 503 and the server still exits 0.
func TestServerProcessGracefulSIGTERMWithWaiter(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	addr := freeAddr(t)
	p := startProc(t, dir, nil, "--listen", addr, "--data", filepath.Join(dir, "data"))
	p.waitReady(addr)
	mustCall(t, addr, "POST", "/v1/acquire", `{"key":"k","holder":"a","ttl_ms":60000}`)
	got := make(chan reply, 1)
	go func() {
		r, err := call(addr, "POST", "/v1/acquire", `{"key":"k","holder":"b","ttl_ms":60000,"wait_ms":60000}`)
		if err != nil {
			r.status = -1
			r.body = map[string]any{"error": err.Error()}
		}
		got <- r
	}()
	// Bounded poll until the waiter is queued (the waiters gauge says so).
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(metricsText(t, addr), "\nfencelock_waiters 1\n") {
		if time.Now().After(deadline) {
			t.Fatal("waiter never queued")
		}
		time.Sleep(10 * time.Millisecond)
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	r := <-got
	if r.status != 503 || r.body["code"] != "unavailable" {
		t.Fatalf("waiter at SIGTERM: %+v", r)
	}
	if code := p.exitCode(); code != 0 {
		t.Fatalf("exit status %d after SIGTERM", code)
	}
}

func metricsText(t *testing.T, addr string) string {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// grantRecord is one acknowledged grant, and whether a release of it was
// ever attempted (after which its state is unknown unless acknowledged).
type grantRecord struct {
	key, holder      string
	token            uint64
	releaseAttempted bool
	released         bool
}

// TestServerProcessKill9 kills the server with SIGKILL while clients are
// acquiring and releasing, restarts it on the same data, and checks the
// durability invariants: every acknowledged live lease is still held by its
// holder under its token; the next token is above every token answered; no
// token was answered twice.
func TestServerProcessKill9(t *testing.T) { testKill9(t) }

// The same kill -9 rounds over the etcd engine (issue 28): its log, hard
// state and token ceiling keep every acknowledged grant and never reissue
// a token.
func TestServerProcessKill9Etcd(t *testing.T) { testKill9(t, "--engine", "etcd") }

// The etcd engine's kill -9 rounds with a snapshot every few dozen
// entries: kills land while snapshots are written and the log compacted,
// and each restart restores the newest snapshot before the log after it.
func TestServerProcessKill9EtcdSnapshots(t *testing.T) {
	data := testKill9(t, "--engine", "etcd", "--snapshot-threshold", "32", "--snapshot-interval", "20ms", "--trailing-logs", "8")
	if snaps, err := os.ReadDir(filepath.Join(data, "snapshots")); err != nil || len(snaps) == 0 {
		t.Fatalf("no snapshot was taken: %v %v", snaps, err)
	}
}

// testKill9 kills a server started with args under load, round after
// round, and checks that every acknowledged grant survived; data is the
// data dir it ran on.
func testKill9(t *testing.T, args ...string) (data string) {
	t.Parallel()
	dir := t.TempDir()
	data = filepath.Join(dir, "data")
	const (
		rounds  = 3
		clients = 6
	)
	answered := map[uint64]string{} // token -> who got it
	var live []*grantRecord
	record := func(g *grantRecord) {
		if prev, dup := answered[g.token]; dup {
			t.Errorf("token %d answered twice: to %s and to %s/%s", g.token, prev, g.key, g.holder)
		}
		answered[g.token] = g.key + "/" + g.holder
		live = append(live, g)
	}

	for round := range rounds {
		addr := freeAddr(t)
		p := startProc(t, dir, nil, append([]string{"--listen", addr, "--data", data}, args...)...)
		p.waitReady(addr)
		checkInvariants(t, addr, live, answered)

		// Load: each client acquires its own keys and a shared one, and
		// releases about every other grant. Requests are in flight when
		// the kill comes.
		var (
			mu    sync.Mutex
			acked int
			wg    sync.WaitGroup
			stop  = make(chan struct{})
		)
		enough := make(chan struct{})
		for c := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				holder := fmt.Sprintf("r%d-c%d", round, c)
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					key := fmt.Sprintf("own/%s/%d", holder, i)
					if i%4 == 0 {
						key = "shared"
					}
					r, err := call(addr, "POST", "/v1/acquire", fmt.Sprintf(`{"key":%q,"holder":%q,"ttl_ms":600000}`, key, holder))
					if err != nil {
						return // the server is gone
					}
					if r.status != 200 {
						continue
					}
					g := &grantRecord{key: key, holder: holder, token: token(r)}
					mu.Lock()
					record(g)
					acked++
					if acked == 150 {
						close(enough)
					}
					// The shared key is always released, so a holder never
					// renews it: a renewal in flight at the kill would
					// legitimately replace an acknowledged token.
					if i%2 == 1 || key == "shared" {
						g.releaseAttempted = true
					}
					mu.Unlock()
					if g.releaseAttempted {
						r, err := call(addr, "POST", "/v1/release", fmt.Sprintf(`{"key":%q,"holder":%q,"token":%d}`, key, holder, g.token))
						if err != nil {
							return
						}
						mu.Lock()
						g.released = r.status == 200 && r.body["released"] == true
						mu.Unlock()
						if !g.released {
							t.Errorf("release of %s/%s token %d answered %+v", key, holder, g.token, r)
						}
					}
				}
			}()
		}
		select {
		case <-enough:
		case <-time.After(60 * time.Second):
			t.Fatal("the load never reached 150 grants")
		}
		if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-p.done
		close(stop)
		wg.Wait()
		t.Logf("round %d: %d grants acknowledged before kill -9", round, acked)
	}

	addr := freeAddr(t)
	p := startProc(t, dir, nil, append([]string{"--listen", addr, "--data", data}, args...)...)
	p.waitReady(addr)
	checkInvariants(t, addr, live, answered)
	p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.exitCode(); code != 0 {
		t.Fatalf("exit status %d", code)
	}
	return data
}

func checkInvariants(t *testing.T, addr string, grants []*grantRecord, answered map[uint64]string) {
	t.Helper()
	// The latest acknowledged grant per key is the one that must hold,
	// unless a release of it was attempted.
	latest := map[string]*grantRecord{}
	for _, g := range grants {
		if cur := latest[g.key]; cur == nil || g.token > cur.token {
			latest[g.key] = g
		}
	}
	for key, g := range latest {
		r := mustCall(t, addr, "GET", "/v1/lock?key="+key, "")
		switch {
		case g.released:
			if r.status == 200 && token(r) == g.token {
				t.Fatalf("%s: released token %d is live again", key, g.token)
			}
		case g.releaseAttempted:
			// The release was in flight at the kill: either outcome.
		default:
			if r.status != 200 || r.body["holder"] != g.holder || token(r) != g.token {
				t.Fatalf("%s: acknowledged lease %s/%d lost after restart: %+v", key, g.holder, g.token, r)
			}
		}
	}
	var maxTok uint64
	for tok := range answered {
		maxTok = max(maxTok, tok)
	}
	probe := fmt.Sprintf("probe/%d", len(answered))
	r := mustCall(t, addr, "POST", "/v1/acquire", fmt.Sprintf(`{"key":%q,"holder":"probe","ttl_ms":600000}`, probe))
	if r.status != 200 || token(r) <= maxTok {
		t.Fatalf("first token after restart %d, not above the %d answered before: %+v", token(r), maxTok, r)
	}
	if _, dup := answered[token(r)]; dup {
		t.Fatalf("token %d issued twice", token(r))
	}
	answered[token(r)] = probe + "/probe"
}

func TestBenchAgainstProcess(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	addr := freeAddr(t)
	p := startProc(t, dir, nil, "--listen", addr, "--data", filepath.Join(dir, "data"))
	p.waitReady(addr)
	for _, mode := range []string{"uncontended", "contended"} {
		out, err := exec.Command(fencelockBinary(t), "bench", "--addr", addr, "--mode", mode, "--clients", "4", "--duration", "2s").Output() // long enough for a cycle to complete on a loaded machine
		if err != nil {
			t.Fatalf("%s: %v\n%s", mode, err, out)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if last := lines[len(lines)-1]; !regexp.MustCompile(`^cycles/s=[1-9]\d* p50=\S+ p99=\S+$`).MatchString(last) {
			t.Fatalf("%s: last line %q", mode, last)
		}
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.exitCode(); code != 0 {
		t.Fatalf("exit status %d", code)
	}
	// Unreachable server: exit status 3.
	err := exec.Command(fencelockBinary(t), "bench", "--addr", addr, "--duration", "100ms").Run()
	var xe *exec.ExitError
	if !errors.As(err, &xe) || xe.ExitCode() != 3 {
		t.Fatalf("bench against a stopped server: %v, want exit status 3", err)
	}
}
