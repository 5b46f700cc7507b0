package client_test

import (
	"bufio"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/internal/server"
)

// realServer runs an in-memory fencelock server the way the server
// command does (HTTP and frames on one port) and returns its address.
func realServer(t *testing.T) string {
	t.Helper()
	addr, _ := realServerAt(t, "127.0.0.1:0")
	return addr
}

// realServerAt is realServer on a given address; stop shuts the server
// down gracefully and waits for it (it is also called at cleanup).
func realServerAt(t *testing.T, at string) (addr string, stop func()) {
	t.Helper()
	ln, err := net.Listen("tcp", at)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- server.Serve(ctx, ln, server.Config{
			HeartbeatTimeout:   50 * time.Millisecond,
			ElectionTimeout:    50 * time.Millisecond,
			LeaderLeaseTimeout: 50 * time.Millisecond,
			Logger:             slog.New(slog.DiscardHandler),
		}, 5*time.Second)
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("server: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	addr = ln.Addr().String()
	hc, err := client.New([]string{addr}, client.WithFramed(false))
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Close()
	wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
	defer wcancel()
	for {
		// Wait for the election: a read answers once the node leads.
		_, err := hc.Check(wctx, "ready", 1)
		if err == nil {
			return addr, stop
		}
		if wctx.Err() != nil {
			t.Fatalf("the server never became ready: %v", err)
		}
	}
}

// TestFramedAndHTTPAnswerAlike runs the same calls over frames and over
// HTTP against one real server and compares every answer and error.
func TestFramedAndHTTPAnswerAlike(t *testing.T) {
	addr := realServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	run := func(c *client.Client, key string) []any {
		var out []any
		note := func(v any, err error) {
			var ae *client.APIError
			if errors.As(err, &ae) {
				out = append(out, *ae)
				return
			}
			out = append(out, v, err)
		}
		a, err := c.Grant(ctx, key, "alice", 10*time.Second, 0)
		note(a.Token > 0 && a.Holder == "alice" && a.Key == key, err)
		_, err = c.Grant(ctx, key, "bob", 10*time.Second, 0)
		note(nil, err) // held by alice
		_, err = c.Grant(ctx, "", "bob", 10*time.Second, 0)
		note(nil, err) // bad key
		_, err = c.Extend(ctx, key, "alice", a.Token, 20*time.Second)
		note(nil, err)
		_, err = c.Extend(ctx, key, "bob", a.Token, 20*time.Second)
		note(nil, err) // not bob's
		ok, err := c.Check(ctx, key, a.Token)
		note(ok, err)
		g, err := c.Get(ctx, key)
		note(g.Holder, err)
		released, err := c.Release(ctx, key, "alice", a.Token)
		note(released, err)
		_, err = c.Get(ctx, key)
		note(nil, err) // free now
		return out
	}
	fc, err := client.New([]string{addr})
	if err != nil {
		t.Fatal(err)
	}
	defer fc.Close()
	hc, err := client.New([]string{addr}, client.WithFramed(false))
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Close()
	// The framed client's hot calls go in binary once its connection has
	// heard which calls the server takes that way: make the connection,
	// wait for that, and count the binary calls the run makes.
	if _, err := fc.Check(ctx, "warm-up", 1); err != nil {
		t.Fatal(err)
	}
	for !fc.BinaryCalls("http://"+addr, "/v1/acquire") {
		if ctx.Err() != nil {
			t.Fatal("the framed connection never learnt the server's binary calls")
		}
		runtime.Gosched()
	}
	before := binaryCalls(t, addr)
	framed, plain := run(fc, "same"), run(hc, "same")
	if !fc.Framed("http://" + addr) {
		t.Fatal("the default client did not use a framed connection")
	}
	// Three grants, two extends, a check and a release are hot calls;
	// gets are not.
	if n := binaryCalls(t, addr) - before; n != 7 {
		t.Fatalf("the framed run made %d binary calls, want 7", n)
	}
	if hc.Framed("http://" + addr) {
		t.Fatal("WithFramed(false) used a framed connection")
	}
	// Remaining times differ between the runs; compare everything else.
	for i := range framed {
		if fa, ok := framed[i].(client.APIError); ok {
			pa, _ := plain[i].(client.APIError)
			fa.Remaining, pa.Remaining = 0, 0
			framed[i], plain[i] = fa, pa
		}
	}
	if !reflect.DeepEqual(framed, plain) {
		t.Fatalf("framed answers\n%+v\ndiffer from HTTP's\n%+v", framed, plain)
	}
}

// TestFramedWaitEndsWithTheCallersContext: an acquire queued over frames
// leaves the server's queue when the caller gives up, as it does when an
// HTTP caller hangs up.
func TestFramedWaitEndsWithTheCallersContext(t *testing.T) {
	addr := realServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.New([]string{addr})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a, err := c.Grant(ctx, "q", "alice", 10*time.Second, 0)
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := c.Grant(wctx, "q", "bob", 10*time.Second, time.Hour)
		errc <- err
	}()
	// Wait until bob is queued, then give up.
	for waiters(t, addr) != 1 {
	}
	wcancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("the waiting Grant returned %v, want context.Canceled", err)
	}
	// bob is no longer queued: alice's release leaves the lock free.
	for waiters(t, addr) != 0 {
	}
	if _, err := c.Release(ctx, "q", "alice", a.Token); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, "q"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("after the release, Get = %v; want the lock free", err)
	}
}

// waiters reads the server's fencelock_waiters gauge.
func waiters(t *testing.T, addr string) int {
	t.Helper()
	return metric(t, addr, "fencelock_waiters")
}

// TestFramedConnectionIsRedialedAfterTheServerRestarts: a client that
// outlives its server's connection dials again on the next call.
func TestFramedConnectionIsRedialedAfterTheServerRestarts(t *testing.T) {
	addr, stop := realServerAt(t, "127.0.0.1:0")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.New([]string{addr})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Grant(ctx, "r", "alice", 10*time.Second, 0); err != nil {
		t.Fatal(err)
	}
	if !c.Framed("http://" + addr) {
		t.Fatal("the first call did not use a framed connection")
	}
	stop() // closes the framed connection
	realServerAt(t, addr)
	// A fresh (in-memory) server: alice's lease is gone, bob gets token 1.
	l, err := c.Grant(ctx, "r", "bob", 10*time.Second, 0)
	if err != nil || l.Token != 1 {
		t.Fatalf("Grant after the restart = %+v, %v", l, err)
	}
	if !c.Framed("http://" + addr) {
		t.Fatal("the call after the restart did not use a framed connection")
	}
}

// binaryCalls reads fencelock_framed_binary_calls_total from addr's
// metrics.
func binaryCalls(t *testing.T, addr string) int {
	t.Helper()
	return metric(t, addr, "fencelock_framed_binary_calls_total")
}

// metric reads one unlabelled metric from addr's /metrics.
func metric(t *testing.T, addr, name string) int {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s %q", name, v)
			}
			return int(n)
		}
	}
	t.Fatalf("no %s in the metrics", name)
	return 0
}
