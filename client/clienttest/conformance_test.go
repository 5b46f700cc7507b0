package clienttest_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/client/clienttest"
	"github.com/fencelock/fencelock/clock"
	"github.com/fencelock/fencelock/internal/framing"
)

// target is a server the conformance scripts run against.
type target interface {
	addr() string // host:port
	// clock is what a client of the target measures time by.
	clock() client.Clock
	// warm returns once c, a framed client, sends the hot calls to the
	// target as binary calls (until its server has said which calls it
	// takes so, a new framed connection sends them as JSON).
	warm(t *testing.T, c *client.Client)
	// queued returns once holder waits on key (or its wait has already
	// been answered on done).
	queued(key, holder string, done <-chan string)
	// elapse lets d of lease time pass: the test's clock, or nothing on
	// a server that keeps real time.
	elapse(d time.Duration)
}

// wire carries one request of the script to a target and returns the
// answer's status and body.
type wire interface {
	send(method, path, body string) (int, []byte, error)
}

// httpWire sends each request as HTTP/1.1.
type httpWire struct{ addr string }

func (w httpWire) send(method, path, body string) (int, []byte, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, "http://"+w.addr+path, rd)
	if err != nil {
		return 0, nil, err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp.StatusCode, data, err
}

// framedWire sends each request as JSON on one framed connection, many at
// once when the script waits.
type framedWire struct{ fc *framing.Conn }

func (w framedWire) send(method, path, body string) (int, []byte, error) {
	var b []byte
	if body != "" {
		b = []byte(body)
	}
	return w.fc.RoundTrip(context.Background(), method, path, b)
}

// answerOf sends one request and returns "STATUS BODY", the body's JSON
// with its keys sorted and remaining_ms, which depends on when the answer
// was made, reduced to whether it is there and within the TTL.
func answerOf(w wire, method, path, body string) string {
	status, data, err := w.send(method, path, body)
	if err != nil {
		return "unreachable: " + err.Error()
	}
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		return fmt.Sprintf("%d %q", status, data)
	}
	out, _ := json.Marshal(normalize(v))
	return fmt.Sprintf("%d %s", status, out)
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

// wireScript is the conformance script of requests: every lock call, the
// wait queue, and the refusals, each answer one line of the transcript.
func wireScript(t *testing.T, tg target, w wire) []string {
	var out []string
	step := func(name, method, path, body string) {
		t.Helper()
		out = append(out, name+": "+answerOf(w, method, path, body))
	}
	wait := func(name, body, key, holder string, elapse time.Duration) {
		t.Helper()
		done := make(chan string, 1)
		go func() { done <- answerOf(w, http.MethodPost, "/v1/acquire", body) }()
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
		done <- answerOf(w, http.MethodPost, "/v1/acquire", `{"key":"jobs/a","holder":"carol","ttl_ms":60000,"wait_ms":60000,"request_id":"w1"}`)
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

// clientScript is the conformance script of client calls: the calls of
// wireScript that a client can make, and grants with options (a
// semaphore, a session, several keys at once), each result one line of
// the transcript. It runs on c, whichever way c reaches the target.
func clientScript(t *testing.T, tg target, c *client.Client) []string {
	ctx := context.Background()
	var out []string
	line := func(name string, v any, err error) {
		t.Helper()
		if err != nil {
			out = append(out, name+": "+errLine(err))
			return
		}
		data, jerr := json.Marshal(v)
		if jerr != nil {
			t.Fatal(jerr)
		}
		var tree any
		if jerr := json.Unmarshal(data, &tree); jerr != nil {
			t.Fatal(jerr)
		}
		norm, _ := json.Marshal(normalize(tree))
		out = append(out, name+": "+string(norm))
	}
	grant := func(name, key, holder string, ttl time.Duration) {
		t.Helper()
		l, err := c.Grant(ctx, key, holder, ttl, 0)
		line(name, l, err)
	}
	grant("grant", "jobs/a", "alice", time.Minute)
	grant("grant held", "jobs/a", "bob", time.Second)
	done := make(chan string, 1)
	go func() {
		_, err := c.Grant(ctx, "jobs/a", "bob", time.Second, 300*time.Millisecond)
		done <- errLine(err)
	}()
	tg.queued("jobs/a", "bob", done)
	tg.elapse(300 * time.Millisecond)
	out = append(out, "wait that elapses: "+<-done)
	l, err := c.Extend(ctx, "jobs/a", "alice", 1, 30*time.Second)
	line("extend", l, err)
	l, err = c.Extend(ctx, "jobs/a", "bob", 1, 30*time.Second)
	line("extend not held", l, err)
	l, err = c.Extend(ctx, "jobs/a", "alice", 7, 30*time.Second)
	line("extend stale token", l, err)
	l, err = c.Renew(ctx, "jobs/a", "alice", time.Minute)
	line("renew", l, err)
	l, err = c.Renew(ctx, "jobs/a", "bob", time.Minute)
	line("renew not held", l, err)
	grant("grant other", "jobs/b", "bob", time.Minute)
	ok, err := c.Check(ctx, "jobs/a", 1)
	line("check old token", ok, err)
	ok, err = c.Check(ctx, "jobs/a", 2)
	line("check current token", ok, err)
	l, err = c.Get(ctx, "jobs/a")
	line("get", l, err)
	l, err = c.Get(ctx, "nope")
	line("get none", l, err)
	ls, err := c.List(ctx, "jobs/", 0)
	line("list", ls, err)
	ls, err = c.List(ctx, "jobs/", 1)
	line("list limit", ls, err)
	res, err := c.ExtendBatch(ctx, "alice", time.Minute, []client.Held{{Key: "jobs/a", Token: 2}, {Key: "jobs/a", Token: 1}, {Key: "jobs/b", Token: 3}})
	type result struct {
		Key   string
		Token uint64
		Lock  client.Lock
		Err   string
	}
	var batch []result
	for _, r := range res {
		batch = append(batch, result{r.Key, r.Token, r.Lock, errLine(r.Err)})
	}
	line("extend batch", batch, err)
	waited := make(chan string, 1)
	go func() {
		l, err := c.Grant(ctx, "jobs/a", "carol", time.Minute, time.Minute)
		if err != nil {
			waited <- errLine(err)
			return
		}
		waited <- fmt.Sprintf("%s %d", l.Holder, l.Token)
	}()
	tg.queued("jobs/a", "carol", waited)
	released, err := c.Release(ctx, "jobs/a", "alice", 1)
	line("release superseded token", released, err)
	released, err = c.Release(ctx, "jobs/a", "alice", 2)
	line("release to the queue", released, err)
	out = append(out, "waiter granted: "+<-waited)
	released, err = c.Release(ctx, "jobs/a", "alice", 0)
	line("release nothing", released, err)
	l, err = c.Get(ctx, "jobs/a")
	line("get after hand-off", l, err)

	for _, h := range []string{"s1", "s2", "s3"} {
		l, err := c.GrantWith(ctx, "pool", h, time.Minute, 0, client.GrantOptions{Permits: 2})
		line("semaphore permit for "+h, l, err)
	}
	l, err = c.GrantWith(ctx, "pool", "w", time.Minute, 0, client.GrantOptions{Mode: api.ModeWrite})
	line("write hold of a semaphore", l, err)
	l, err = c.GrantWith(ctx, "rw", "r1", time.Minute, 0, client.GrantOptions{Mode: api.ModeRead})
	line("read hold", l, err)
	l, err = c.GrantWith(ctx, "rw", "w1", time.Minute, 0, client.GrantOptions{Mode: api.ModeWrite})
	line("write hold beside a reader", l, err)

	sess, err := c.OpenSession(ctx, "dave", time.Minute)
	line("open session", sessionLine(sess), err)
	l, err = c.GrantWith(ctx, "jobs/c", "dave", 0, 0, client.GrantOptions{Session: sess.ID})
	line("grant under the session", l, err)
	closed, err := c.CloseSession(ctx, sess.ID, "dave")
	line("close session", sessionLine(closed), err)
	l, err = c.Get(ctx, "jobs/c")
	line("get after the session closed", l, err)
	locks, err := c.AcquireAll(ctx, []string{"all/1", "all/2"}, "erin", time.Minute, client.GrantOptions{})
	line("acquire all", locks, err)
	locks, err = c.AcquireAll(ctx, []string{"all/2", "all/3"}, "frank", time.Minute, client.GrantOptions{})
	line("acquire all held", locks, err)

	grant("invalid key", "", "alice", time.Second)
	grant("invalid ttl", "k", "alice", 10*time.Millisecond)
	_, err = c.Grant(ctx, "k", "alice", time.Second, -1)
	out = append(out, "invalid wait: "+errLine(err))
	released, err = c.Release(ctx, "k", "", 0)
	line("invalid holder", released, err)
	return out
}

// sessionLine is a session as the transcript shows it: its id is the
// server's to choose, and what remains of it depends on when the answer
// was made, so only that they are sane is shown.
func sessionLine(s client.SessionInfo) string {
	return fmt.Sprintf("holder=%s has-id=%v ttl=%v remaining-ok=%v locks=%d waiting=%d",
		s.Holder, s.ID != 0, s.TTL, s.Remaining > 0 && s.Remaining <= s.TTL, s.Locks, s.Waiting)
}

// errLine is an error as the transcript shows it: what the client makes
// of it (status, code and the fields beside them) and the server's
// message.
func errLine(err error) string {
	if err == nil {
		return "ok"
	}
	var ae *client.APIError
	if !errors.As(err, &ae) {
		return "error: " + err.Error()
	}
	return fmt.Sprintf("%d %s field=%q holder=%q kind=%q permits=%d held=%v: %s", ae.Status, ae.Code, ae.Field, ae.Holder,
		ae.Kind, ae.Permits, errors.Is(err, client.ErrHeld), ae.Message)
}

// A run is one way of driving a target: a script and how it reaches the
// server.
type run struct {
	name string
	// script runs on a fresh target.
	script func(t *testing.T, tg target) []string
	// via checks, on a double, that the run's requests came the way it
	// meant them to.
	via func(t *testing.T, srv *clienttest.Server)
}

var runs = []run{
	{"HTTP", func(t *testing.T, tg target) []string {
		return wireScript(t, tg, httpWire{tg.addr()})
	}, func(t *testing.T, srv *clienttest.Server) {
		allVia(t, srv, clienttest.HTTP, "acquire", "extend", "renew", "release", "check", "lock", "locks", "extend-batch", "healthz")
	}},
	{"framed", func(t *testing.T, tg target) []string {
		fc, err := framing.Dial(context.Background(), tg.addr())
		if err != nil {
			t.Fatal(err)
		}
		defer fc.Close()
		return wireScript(t, tg, framedWire{fc})
	}, func(t *testing.T, srv *clienttest.Server) {
		allVia(t, srv, clienttest.Framed, "acquire", "extend", "renew", "release", "check", "lock", "locks", "extend-batch", "healthz")
	}},
	{"HTTP-only client", func(t *testing.T, tg target) []string {
		return clientScript(t, tg, newClient(t, tg, false))
	}, func(t *testing.T, srv *clienttest.Server) {
		allVia(t, srv, clienttest.HTTP, "acquire", "extend", "renew", "release", "check", "lock", "locks", "extend-batch",
			"session/open", "session/close", "acquire-all")
	}},
	{"framed client with binary calls", func(t *testing.T, tg target) []string {
		c := newClient(t, tg, true)
		tg.warm(t, c)
		return clientScript(t, tg, c)
	}, func(t *testing.T, srv *clienttest.Server) {
		allVia(t, srv, clienttest.Call, "acquire", "extend", "release")
		allVia(t, srv, clienttest.Framed, "renew", "lock", "locks", "extend-batch", "session/open", "session/close", "acquire-all")
		// The checks that warmed the connection up may have gone as
		// JSON; the script's went after them.
		if srv.CountVia("check", clienttest.HTTP) != 0 || srv.CountVia("check", clienttest.Call) < 2 {
			t.Errorf("checks: %d by HTTP, %d as binary calls", srv.CountVia("check", clienttest.HTTP), srv.CountVia("check", clienttest.Call))
		}
	}},
}

// allVia checks that every request to each route came by tr.
func allVia(t *testing.T, srv *clienttest.Server, tr clienttest.Transport, routes ...string) {
	t.Helper()
	for _, rt := range routes {
		if n, via := srv.Count(rt), srv.CountVia(rt, tr); n == 0 || n != via {
			t.Errorf("%s: %d requests, %d of them by %s", rt, n, via, tr)
		}
	}
}

func newClient(t *testing.T, tg target, framed bool) *client.Client {
	t.Helper()
	c, err := client.New([]string{tg.addr()}, client.WithFramed(framed), client.WithClock(tg.clock()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// TestConformance: each script, driven each way (requests over HTTP and
// over a framed connection, a client over HTTP alone and one over frames
// and binary calls), gives the same answers from the test double (on the
// real clock and on a test clock) as from a `fencelock server` process,
// and the double saw its requests come the way they were sent.
func TestConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts the fencelock binary")
	}
	bin := build(t)
	var clientWant []string
	for _, r := range runs {
		t.Run(r.name, func(t *testing.T) {
			want := r.script(t, startProcess(t, bin))
			if testing.Verbose() {
				t.Logf("process:\n%s", strings.Join(want, "\n"))
			}
			if strings.Contains(r.name, "client") {
				// A client's results do not depend on how it reached
				// the server.
				if clientWant != nil && !slices.Equal(clientWant, want) {
					t.Errorf("the process's answers to the client differ from the other client's:\n%s", diff(clientWant, want))
				}
				clientWant = want
			}
			for _, tc := range []struct {
				name string
				tg   func(t *testing.T) *double
			}{
				{"double", func(t *testing.T) *double { return newDouble(t, client.SystemClock{}, nil) }},
				{"double on a test clock", func(t *testing.T) *double {
					clk := newFakeClock()
					return newDouble(t, clk, clk)
				}},
			} {
				t.Run(tc.name, func(t *testing.T) {
					d := tc.tg(t)
					got := r.script(t, d)
					if !slices.Equal(want, got) {
						t.Errorf("answers differ:\n%s", diff(want, got))
						return
					}
					r.via(t, d.srv)
					t.Logf("%d answers alike", len(got))
				})
			}
		})
	}
}

// diff lists the steps whose lines differ.
func diff(want, got []string) string {
	var b strings.Builder
	for i := range max(len(want), len(got)) {
		var w, g string
		if i < len(want) {
			w = want[i]
		}
		if i < len(got) {
			g = got[i]
		}
		if w != g {
			fmt.Fprintf(&b, "step %d:\n  process: %s\n  double:  %s\n", i, w, g)
		}
	}
	return b.String()
}

type double struct {
	srv *clienttest.Server
	clk client.Clock
	fc  *clock.Fake // nil: real time
}

func newDouble(t *testing.T, c client.Clock, fc *clock.Fake) *double {
	srv := clienttest.NewServer(c)
	t.Cleanup(srv.Close)
	return &double{srv: srv, clk: c, fc: fc}
}

func (d *double) addr() string { return d.srv.Addr }

func (d *double) clock() client.Clock { return d.clk }

// warm checks until one goes as a binary call: from then on the
// connection knows the server's binary calls.
func (d *double) warm(t *testing.T, c *client.Client) {
	t.Helper()
	waitUntil(func() bool {
		if _, err := c.Check(context.Background(), "warm", 1); err != nil {
			t.Fatal(err)
		}
		return d.srv.CountVia("check", clienttest.Call) > 0
	})
}

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
	if d.fc != nil {
		d.fc.Advance(dur)
	}
}

// process is a `fencelock server` process on a fresh data directory.
type process struct{ hostport string }

func (p *process) addr() string { return p.hostport }

func (p *process) clock() client.Clock { return client.SystemClock{} }

// warm makes the same checks as a double's warm-up, so that the
// transcripts stay alike; the process cannot say how they came.
func (p *process) warm(t *testing.T, c *client.Client) {
	t.Helper()
	if _, err := c.Check(context.Background(), "warm", 1); err != nil {
		t.Fatal(err)
	}
}

// queued polls the waiters gauge: the process has no other way to say.
func (p *process) queued(_, _ string, done <-chan string) {
	waitUntil(func() bool { return len(done) > 0 || p.waiters() > 0 })
}

func (p *process) elapse(time.Duration) {} // real time passes by itself

func (p *process) waiters() int {
	resp, err := http.Get("http://" + p.hostport + "/metrics")
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

// build builds the fencelock binary into a temporary directory.
func build(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "fencelock")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/fencelock/fencelock/cmd/fencelock")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// startProcess starts bin as a server on a fresh data directory and a
// free loopback port, and stops it at the end of the test.
func startProcess(t *testing.T, bin string) *process {
	t.Helper()
	dir := t.TempDir()
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
	p := &process{hostport: addr}
	waitUntil(func() bool {
		resp, err := http.Get("http://" + addr + "/readyz")
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
