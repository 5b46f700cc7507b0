package clienttest_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/client/clienttest"
	"github.com/fencelock/fencelock/clock"
)

// target is a server the conformance script runs against.
type target interface {
	base() string
	// queued returns once holder waits on key (or its wait has already
	// been answered on done).
	queued(key, holder string, done <-chan string)
	// elapse lets d of lease time pass: the test's clock, or nothing on
	// a server that keeps real time.
	elapse(d time.Duration)
}

// answerOf sends one request and returns "STATUS BODY", the body's JSON
// with its keys sorted and remaining_ms, which depends on when the answer
// was made, reduced to whether it is there and within the TTL.
func answerOf(t *testing.T, tg target, method, path, body string) string {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, tg.base()+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "unreachable: " + err.Error()
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		return fmt.Sprintf("%d %q", resp.StatusCode, data)
	}
	out, _ := json.Marshal(normalize(v))
	return fmt.Sprintf("%d %s", resp.StatusCode, out)
}

// normalize replaces each remaining_ms by "ok" when it is between 0 and
// the ttl_ms beside it (or any TTL, for a refusal), else by "bad".
func normalize(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if k == "remaining_ms" {
				r, _ := e.(float64)
				limit := float64(24 * time.Hour / time.Millisecond)
				if ttl, ok := x["ttl_ms"].(float64); ok {
					limit = ttl
				}
				x[k] = "bad"
				if r >= 0 && r <= limit {
					x[k] = "ok"
				}
				continue
			}
			x[k] = normalize(e)
		}
	case []any:
		for i, e := range x {
			x[i] = normalize(e)
		}
	}
	return v
}

// script is the conformance script: every lock call, the wait queue, and
// the refusals, each answer one line of the transcript.
func script(t *testing.T, tg target) []string {
	var out []string
	step := func(name, method, path, body string) {
		t.Helper()
		out = append(out, name+": "+answerOf(t, tg, method, path, body))
	}
	wait := func(name, body, key, holder string, elapse time.Duration) {
		t.Helper()
		done := make(chan string, 1)
		go func() { done <- answerOf(t, tg, http.MethodPost, "/v1/acquire", body) }()
		tg.queued(key, holder, done)
		tg.elapse(elapse)
		ans := <-done
		out = append(out, name+": "+ans)
	}
	step("acquire", "POST", "/v1/acquire", `{"key":"jobs/a","holder":"alice","ttl_ms":60000,"request_id":"r1"}`)
	step("acquire again (same request id)", "POST", "/v1/acquire", `{"key":"jobs/a","holder":"alice","ttl_ms":60000,"request_id":"r1"}`)
	step("acquire held", "POST", "/v1/acquire", `{"key":"jobs/a","holder":"bob","ttl_ms":1000}`)
	wait("wait that elapses", `{"key":"jobs/a","holder":"bob","ttl_ms":1000,"wait_ms":300}`, "jobs/a", "bob", 300*time.Millisecond)
	step("extend", "POST", "/v1/extend", `{"key":"jobs/a","holder":"alice","token":1,"ttl_ms":30000}`)
	step("extend not held", "POST", "/v1/extend", `{"key":"jobs/a","holder":"bob","token":1,"ttl_ms":30000}`)
	step("extend stale token", "POST", "/v1/extend", `{"key":"jobs/a","holder":"alice","token":7,"ttl_ms":30000}`)
	step("renew", "POST", "/v1/renew", `{"key":"jobs/a","holder":"alice","ttl_ms":60000}`)
	step("renew not held", "POST", "/v1/renew", `{"key":"jobs/a","holder":"bob","ttl_ms":60000}`)
	step("acquire other", "POST", "/v1/acquire", `{"key":"jobs/b","holder":"bob","ttl_ms":60000}`)
	step("check old token", "GET", "/v1/check?key=jobs/a&token=1", "")
	step("check current token", "GET", "/v1/check?key=jobs/a&token=2", "")
	step("get", "GET", "/v1/lock?key=jobs/a", "")
	step("get none", "GET", "/v1/lock?key=nope", "")
	step("list", "GET", "/v1/locks?prefix=jobs/", "")
	step("list limit", "GET", "/v1/locks?prefix=jobs/&limit=1", "")
	step("extend batch", "POST", "/v1/extend-batch", `{"holder":"alice","ttl_ms":60000,"leases":[{"key":"jobs/a","token":2},{"key":"jobs/a","token":1},{"key":"jobs/b","token":3}]}`)
	done := make(chan string, 1)
	go func() {
		done <- answerOf(t, tg, http.MethodPost, "/v1/acquire", `{"key":"jobs/a","holder":"carol","ttl_ms":60000,"wait_ms":60000,"request_id":"w1"}`)
	}()
	tg.queued("jobs/a", "carol", done)
	step("release superseded token", "POST", "/v1/release", `{"key":"jobs/a","holder":"alice","token":1}`)
	step("release to the queue", "POST", "/v1/release", `{"key":"jobs/a","holder":"alice","token":2}`)
	out = append(out, "waiter granted: "+<-done)
	step("release nothing", "POST", "/v1/release", `{"key":"jobs/a","holder":"alice"}`)
	step("get after hand-off", "GET", "/v1/lock?key=jobs/a", "")
	step("invalid key", "POST", "/v1/acquire", `{"key":"","holder":"alice","ttl_ms":1000}`)
	step("invalid ttl", "POST", "/v1/acquire", `{"key":"k","holder":"alice","ttl_ms":10}`)
	step("invalid wait", "POST", "/v1/acquire", `{"key":"k","holder":"alice","ttl_ms":1000,"wait_ms":-1}`)
	step("invalid holder", "POST", "/v1/release", `{"key":"k","holder":""}`)
	step("unknown field", "POST", "/v1/acquire", `{"key":"k","holder":"alice","ttl_ms":1000,"colour":"red"}`)
	step("check without token", "GET", "/v1/check?key=k", "")
	step("wrong method", "GET", "/v1/acquire", "")
	step("no such route", "GET", "/v1/nope", "")
	step("health", "GET", "/healthz", "")
	return out
}

// TestConformance: the script gives the same answers from the test double
// (on the real clock and on a test clock) as from a `fencelock server`
// process.
func TestConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts the fencelock binary")
	}
	want := script(t, startProcess(t))
	if testing.Verbose() {
		t.Logf("process:\n%s", strings.Join(want, "\n"))
	}
	for _, tc := range []struct {
		name string
		tg   func(t *testing.T) target
	}{
		{"double", func(t *testing.T) target { return newDouble(t, client.SystemClock{}, nil) }},
		{"double on a test clock", func(t *testing.T) target {
			clk := newFakeClock()
			return newDouble(t, clk, clk)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := script(t, tc.tg(t))
			for i := range max(len(want), len(got)) {
				var w, g string
				if i < len(want) {
					w = want[i]
				}
				if i < len(got) {
					g = got[i]
				}
				if w != g {
					t.Errorf("step %d:\n  process: %s\n  double:  %s", i, w, g)
				}
			}
			if t.Failed() {
				return
			}
			t.Logf("%d answers alike", len(got))
		})
	}
}

type double struct {
	srv *clienttest.Server
	clk *clock.Fake // nil: real time
}

func newDouble(t *testing.T, c client.Clock, clk *clock.Fake) *double {
	srv := clienttest.NewServer(c)
	t.Cleanup(srv.Close)
	return &double{srv: srv, clk: clk}
}

func (d *double) base() string { return d.srv.URL }

func (d *double) queued(key, holder string, done <-chan string) {
	waitUntil(func() bool {
		for _, h := range d.srv.Waiters(key) {
			if h == holder {
				return true
			}
		}
		return len(done) > 0
	})
}

func (d *double) elapse(dur time.Duration) {
	if d.clk != nil {
		d.clk.Advance(dur)
	}
}

// process is a `fencelock server` process on a fresh data directory.
type process struct{ addr string }

func (p *process) base() string { return "http://" + p.addr }

// queued polls the waiters gauge: the process has no other way to say.
func (p *process) queued(_, _ string, done <-chan string) {
	waitUntil(func() bool { return len(done) > 0 || p.waiters() > 0 })
}

func (p *process) elapse(time.Duration) {} // real time passes by itself

func (p *process) waiters() int {
	resp, err := http.Get(p.base() + "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var n int
		if _, err := fmt.Sscanf(sc.Text(), "fencelock_waiters %d", &n); err == nil {
			return n
		}
	}
	return 0
}

func startProcess(t *testing.T) *process {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "fencelock")
	build := exec.Command("go", "build", "-o", bin, "github.com/fencelock/fencelock/cmd/fencelock")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	var stderr bytes.Buffer
	cmd := exec.Command(bin, "server", "--listen", addr, "--data", filepath.Join(dir, "data"), "--log-level", "error")
	cmd.Stderr = &stderr
	cmd.Env = os.Environ()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("server stderr:\n%s", stderr.String())
		}
	})
	p := &process{addr: addr}
	waitUntil(func() bool {
		resp, err := http.Get(p.base() + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return p
}

// waitUntil polls cond, bounded: the bound only turns a hang into a
// failure, it decides nothing.
func waitUntil(cond func() bool) {
	for deadline := time.Now().Add(30 * time.Second); !cond() && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
}
