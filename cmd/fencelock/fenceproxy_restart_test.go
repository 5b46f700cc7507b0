package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock/clock"
	"github.com/fencelock/fencelock/fence"
)

// slowUpstream applies a request when it is let go: the one whose token
// is slow waits for release, however its connection fares, as an
// upstream that cannot be cancelled does; the others apply at once.
type slowUpstream struct {
	slow    string
	arrived chan struct{} // closed when the slow one has arrived
	release chan struct{}
	once    sync.Once
	mu      sync.Mutex
	applied []string
}

func (u *slowUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	tok := r.Header.Get(fence.Header)
	if tok == u.slow {
		close(u.arrived)
		<-u.release
	}
	u.mu.Lock()
	u.applied = append(u.applied, tok)
	u.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// let lets the slow request apply.
func (u *slowUpstream) let() { u.once.Do(func() { close(u.release) }) }

func newSlowUpstream(t *testing.T, slow string) (*slowUpstream, *url.URL) {
	up := &slowUpstream{slow: slow, arrived: make(chan struct{}), release: make(chan struct{})}
	srv := httptest.NewServer(up)
	t.Cleanup(srv.Close)
	t.Cleanup(up.let) // before srv.Close, which waits for it
	u, _ := url.Parse(srv.URL)
	return up, u
}

func (u *slowUpstream) order() string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return strings.Join(u.applied, ",")
}

// waitTimer returns once clk has a timer armed: the proxy is waiting on
// it. It fails if, meanwhile, the upstream applied anything: the proxy
// forwarded instead of waiting.
func waitTimer(t *testing.T, clk *clock.Fake, up *slowUpstream) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for clk.Pending() == 0 {
		if got := up.order(); got != "" {
			t.Fatalf("the proxy forwarded instead of waiting: the upstream applied %s before 23", got)
		}
		if time.Now().After(deadline) {
			t.Fatal("the proxy never waited")
		}
		time.Sleep(time.Millisecond) // polling for a state; the state decides
	}
}

// Finding 4 of issue 25: a request for token 23 that a proxy forwarded
// before it was killed was applied by a slow upstream after token 25's,
// forwarded by the restarted proxy 30 ms later. Now a proxy started after
// one that did not stop cleanly forwards nothing until --upstream-timeout
// has passed, the time within which the upstream must have applied or
// dropped anything it was sent; so 25 waits, and 23, which the upstream
// applies within that time, lands first.
func TestFenceProxyRestartCannotReorder(t *testing.T) {
	const timeout = 10 * time.Second
	up, u := newSlowUpstream(t, "23")
	dir := t.TempDir()
	res, _ := parseResourceFrom("path", "exact")

	// The first proxy forwards 23 and dies before the answer.
	clkA := clock.NewFake(time.Unix(1_700_000_000, 0))
	ffA, holdA, err := proxyStart(dir, timeout, clkA.Now())
	if err != nil || !holdA.IsZero() {
		t.Fatalf("first start on an empty dir: hold until %v, %v", holdA, err)
	}
	a := httptest.NewServer(newFenceProxy(ffA, proxyConfig{upstream: u, resource: res, clock: clkA, upstreamTimeout: timeout}))
	go func() {
		req, _ := http.NewRequest("PUT", a.URL+"/v/x", strings.NewReader("23"))
		req.Header.Set(fence.Header, "23")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	<-up.arrived
	// kill -9: the listener and every connection gone, the directory let
	// go, and no clean-stop record written.
	a.Listener.Close()
	a.CloseClientConnections()
	ffA.Close()
	defer clkA.Advance(timeout) // the dead proxy's goroutine, waiting out 23

	clkB := clock.NewFake(clkA.Now().Add(30 * time.Millisecond))
	ffB, hold, err := proxyStart(dir, timeout, clkB.Now())
	if err != nil {
		t.Fatal(err)
	}
	defer ffB.Close()
	if want := clkB.Now().Add(timeout); !hold.Equal(want) {
		t.Fatalf("after an unclean stop: hold until %v, want %v", hold, want)
	}
	b := httptest.NewServer(newFenceProxy(ffB, proxyConfig{upstream: u, resource: res, clock: clkB, upstreamTimeout: timeout, holdUntil: hold}))
	defer b.Close()
	done := make(chan proxyAnswer, 1)
	go func() { done <- send(t, "PUT", b.URL+"/v/x", "25", "25") }()
	waitTimer(t, clkB, up)
	if got := up.order(); got != "" {
		t.Fatalf("forwarded during the hold: the upstream applied %q", got)
	}
	up.let() // the upstream applies 23, late but within the timeout
	clkB.Advance(timeout)
	if got := <-done; got.status != http.StatusNoContent {
		t.Fatalf("25 after the hold: %d %s", got.status, got.body)
	}
	if got := up.order(); got != "23,25" {
		t.Fatalf("the upstream applied %s, want 23,25", got)
	}
}

// A proxy that stopped cleanly (every request answered) leaves a record,
// and the next start holds nothing.
func TestFenceProxyCleanStopNeedsNoHold(t *testing.T) {
	dir := t.TempDir()
	now := time.Unix(1_700_000_000, 0)
	ff, hold, err := proxyStart(dir, time.Second, now)
	if err != nil || !hold.IsZero() {
		t.Fatal(hold, err)
	}
	if err := ff.Admit(t.Context(), "/v/x", 3, nil); err != nil {
		t.Fatal(err)
	}
	ff.Close()
	if err := proxyStopped(dir); err != nil {
		t.Fatal(err)
	}
	ff, hold, err = proxyStart(dir, time.Second, now)
	if err != nil || !hold.IsZero() {
		t.Fatalf("after a clean stop: hold %v %v", hold, err)
	}
	ff.Close()
	// That start consumed the record: a crash now is unclean.
	ff, hold, err = proxyStart(dir, time.Second, now)
	if err != nil || !hold.Equal(now.Add(time.Second)) {
		t.Fatalf("after an unclean stop: hold %v %v", hold, err)
	}
	ff.Close()
}

// A forwarded request that gets no answer (the client went away, the
// upstream took longer than --upstream-timeout) keeps its resource until
// the timeout has passed since it was sent: the upstream may still apply
// it, and the next request must not overtake it.
func TestFenceProxyUnansweredRequestHoldsItsResource(t *testing.T) {
	const timeout = 10 * time.Second
	up, u := newSlowUpstream(t, "23")
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	ff, _, err := proxyStart(t.TempDir(), timeout, clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	defer ff.Close()
	res, _ := parseResourceFrom("path", "exact")
	p := httptest.NewServer(newFenceProxy(ff, proxyConfig{upstream: u, resource: res, clock: clk, upstreamTimeout: timeout}))
	defer p.Close()
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		c := &http.Client{}
		req, _ := http.NewRequest("PUT", p.URL+"/v/x", strings.NewReader("23"))
		req.Header.Set(fence.Header, "23")
		ctx, cancel := context.WithCancel(t.Context())
		go func() { <-up.arrived; cancel() }() // the client gives up
		if resp, err := c.Do(req.WithContext(ctx)); err == nil {
			resp.Body.Close()
		}
	}()
	<-gone
	done := make(chan proxyAnswer, 1)
	go func() { done <- send(t, "PUT", p.URL+"/v/x", "25", "25") }()
	waitTimer(t, clk, up) // the proxy waits out 23, 25 behind it
	up.let()
	clk.Advance(timeout)
	if got := <-done; got.status != http.StatusNoContent {
		t.Fatalf("25: %d %s", got.status, got.body)
	}
	if got := up.order(); got != "23,25" {
		t.Fatalf("the upstream applied %s, want 23,25", got)
	}
}

// The run of finding 4 with real processes: a proxy is killed -9 while an
// upstream that takes 300 ms to apply holds token 23's request; a new
// proxy on the same --state is started at once and sent token 25. Before,
// the upstream applied 25, then 23. Now the new proxy holds 25 for
// --upstream-timeout and the upstream applies 23 first.
func TestFenceProxyRestartProcessCannotReorder(t *testing.T) {
	fencelockBinary(t) // the process tier
	start := time.Now()
	var mu sync.Mutex
	var applied []string
	arrived := make(chan struct{})
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok := r.Header.Get(fence.Header)
		if tok == "23" {
			close(arrived)
			time.Sleep(300 * time.Millisecond) // the slow apply the scenario is about
		}
		mu.Lock()
		applied = append(applied, tok)
		t.Logf("%6.3fs upstream applied token %s", time.Since(start).Seconds(), tok)
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	defer upstream.Close()
	state := t.TempDir()
	p1, addr1 := startProxyProcess(t, upstream.URL, state, "--upstream-timeout", "2s")
	go func() {
		req, _ := http.NewRequest("PUT", addr1+"/v/x", strings.NewReader("23"))
		req.Header.Set(fence.Header, "23")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	<-arrived
	p1.Process.Kill()
	p1.Wait()
	t.Logf("%6.3fs proxy killed -9 with token 23 at the upstream", time.Since(start).Seconds())
	_, addr2 := startProxyProcess(t, upstream.URL, state, "--upstream-timeout", "2s")
	t.Logf("%6.3fs proxy restarted; sending token 25", time.Since(start).Seconds())
	if got := send(t, "PUT", addr2+"/v/x", "25", "25"); got.status != http.StatusNoContent {
		t.Fatalf("25: %d %s", got.status, got.body)
	}
	t.Logf("%6.3fs token 25 answered", time.Since(start).Seconds())
	mu.Lock()
	defer mu.Unlock()
	if got := strings.Join(applied, ","); got != "23,25" {
		t.Fatalf("the upstream applied %s, want 23,25", got)
	}
}
