package peerbench

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/framing"
	"github.com/fencelock/fencelock/internal/server"
)

// openOrSkip opens a system the test owns: a fencelock server it starts
// in-process on a free loopback port, or a peer at PEERBENCH_ADDR_<NAME>
// (say, what 'bash bench/peers/setup.sh' started), which the caller gives
// on purpose. Without that variable the peer's test is skipped: it never
// falls back to a default address, where a server it did not start may
// be listening.
func openOrSkip(t *testing.T, name string) System {
	t.Helper()
	var addr string
	if name == "fencelock" {
		addr = startFencelock(t)
	} else {
		env := "PEERBENCH_ADDR_" + strings.ToUpper(name)
		if addr = os.Getenv(env); addr == "" {
			t.Skipf("%s: no %s given; this test only reaches a peer it is given (bash bench/peers/setup.sh, then %s=%s)",
				name, env, env, peerDefaults[name])
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := Open(ctx, name, Options{Addr: addr, TTL: 5 * time.Second, Clients: 8, DialTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// peerDefaults are DefaultAddrs as shipped (TestMain points DefaultAddrs at
// a tripwire).
var peerDefaults = maps.Clone(DefaultAddrs)

// startFencelock serves an in-memory fencelock server, HTTP and frames on
// one port as the server command serves them, on a free loopback port.
func startFencelock(t *testing.T) string {
	t.Helper()
	s, err := server.New(server.Config{HeartbeatTimeout: 50 * time.Millisecond, ElectionTimeout: 50 * time.Millisecond, LeaderLeaseTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.WaitReady(ctx); err != nil {
		s.Close()
		t.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(s.Handler())
	fs := &framing.Server{Handler: s.Handler(), Calls: s.Calls()}
	hs.Listener = framing.Listen(hs.Listener, fs)
	hs.Start()
	t.Cleanup(func() {
		s.BeginShutdown()
		hs.Close()
		fs.Close()
		s.Close()
	})
	return strings.TrimPrefix(hs.URL, "http://")
}

func newClient(t *testing.T, s System, id int) Client {
	t.Helper()
	c, err := s.NewClient(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestDrivers(t *testing.T) {
	for _, name := range Systems {
		t.Run(name, func(t *testing.T) {
			s := openOrSkip(t, name)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			key := "flbench-test/" + time.Now().Format("150405.000000000")
			if p, ok := s.(Preparer); ok {
				if err := p.Prepare(ctx, []string{key, key + "-hold"}); err != nil {
					t.Fatal(err)
				}
			}
			a, b := newClient(t, s, 0), newClient(t, s, 1)

			la, err := a.Lock(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if la.Token() == 0 {
				t.Error("grant has token 0")
			}

			// A second client waits while the key is held, and gives up cleanly.
			short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
			if _, err := b.Lock(short, key); !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Lock on a held key: %v, want a deadline error", err)
			}
			cancelShort()

			// It gets the lock once A releases, with a higher token.
			got := make(chan Lease, 1)
			errc := make(chan error, 1)
			go func() {
				l, err := b.Lock(ctx, key)
				if err != nil {
					errc <- err
					return
				}
				got <- l
			}()
			time.Sleep(100 * time.Millisecond) // let B queue; correctness does not depend on it
			if err := la.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			var lb Lease
			select {
			case lb = <-got:
			case err := <-errc:
				t.Fatal(err)
			}
			if lb.Token() <= la.Token() {
				t.Errorf("token after hand-off %d <= previous %d", lb.Token(), la.Token())
			}
			if err := lb.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			if err := lb.Unlock(ctx); !errors.Is(err, ErrNotHeld) {
				t.Errorf("second Unlock: %v, want ErrNotHeld", err)
			}

			// A lease of its own, extended without a new token.
			h, err := a.Hold(ctx, key+"-hold", 3*time.Second)
			if errors.Is(err, ErrNotSupported) {
				t.Logf("Hold: %v", err)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if err := h.Extend(ctx); err != nil {
				t.Errorf("Extend: %v", err)
			}
			if err := h.Unlock(ctx); err != nil {
				t.Errorf("Unlock after Extend: %v", err)
			}
		})
	}
}

func TestWorkloadsShort(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	p := Params{Duration: 300 * time.Millisecond, Warmup: -1, W1Clients: 4, W1Keys: 40, W2Clients: 3, W3Leases: 30, W3TTL: 3 * time.Second, W3Workers: 3}
	for _, name := range Systems {
		t.Run(name, func(t *testing.T) {
			s := openOrSkip(t, name)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			for _, w := range []Workload{W1, W2, W3} {
				r, err := Run(ctx, s, w, p)
				if err != nil {
					t.Fatalf("%s: %v", w, err)
				}
				if r.Skipped != "" {
					t.Logf("%s skipped: %s", w, r.Skipped)
					continue
				}
				if r.Ops == 0 || r.Errors != 0 {
					t.Errorf("%s: %d ops, %d errors (%s)", w, r.Ops, r.Errors, r.FirstError)
				}
				if r.Fairness != nil {
					t.Logf("%s: %d grants, FIFO %v", w, r.Fairness.Grants, r.Fairness.FIFO())
				}
			}
		})
	}
}

// A cluster address list: the driver asks the nodes in turn for the
// members and works against the leader's client address.
func TestFencelockFindsLeader(t *testing.T) {
	noLeader := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(api.MembersResponse{Node: "n1"})
	}))
	defer noLeader.Close()
	knows := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != api.PathMembers {
			http.NotFound(w, r)
			return
		}
		json.NewEncoder(w).Encode(api.MembersResponse{Node: "n2", Leader: "n3", LeaderAddr: "127.0.0.1:9"})
	}))
	defer knows.Close()
	host := func(s *httptest.Server) string { return strings.TrimPrefix(s.URL, "http://") }
	got, err := flLeader(context.Background(), http.DefaultClient, []string{host(noLeader), host(knows)})
	if err != nil || got != "127.0.0.1:9" {
		t.Fatalf("flLeader = %q, %v; want the leader address the second node names", got, err)
	}
	leads := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(api.MembersResponse{Node: "n4", Leader: "n4"})
	}))
	defer leads.Close()
	if got, err := flLeader(context.Background(), http.DefaultClient, []string{host(noLeader), host(leads)}); err != nil || got != host(leads) {
		t.Fatalf("a leader without a client address on record: flLeader = %q, %v; want the address asked", got, err)
	}
	if _, err := flLeader(context.Background(), http.DefaultClient, []string{host(noLeader)}); err == nil {
		t.Fatal("no node knows a leader, yet flLeader found one")
	}
	if a := (Options{Addr: " a:1, b:2,,c:3 "}).addrs(); strings.Join(a, "|") != "a:1|b:2|c:3" {
		t.Fatalf("addrs = %q", a)
	}
}

// W5 on the test's own in-process server (the test process is the server
// process): every session kept alive through the window, none late, and
// the server's CPU and memory read.
func TestW5Short(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	for _, name := range []string{"fencelock", "etcd", "redis"} {
		t.Run(name, func(t *testing.T) {
			s := openOrSkip(t, name)
			p := Params{Duration: 700 * time.Millisecond, Warmup: -1, W5Sessions: 60, W5TTL: 3 * time.Second, W5Workers: 3}
			if name == "fencelock" {
				p.W4PID = os.Getpid()
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			r, err := Run(ctx, s, W5, p)
			if err != nil {
				t.Fatal(err)
			}
			if name == "redis" {
				if r.Skipped == "" {
					t.Fatal("redis has no sessions, yet W5 ran")
				}
				return
			}
			if r.Ops == 0 || r.Errors != 0 || r.KeepAlive == nil || r.KeepAlive.Leases != 60 || r.KeepAlive.Late != 0 {
				t.Fatalf("%d ops, %d errors (%s), keep-alive %+v", r.Ops, r.Errors, r.FirstError, r.KeepAlive)
			}
			if r.Server == nil || r.Server.RSS <= 0 || r.Server.CPU < 0 {
				t.Fatalf("server use %+v", r.Server)
			}
		})
	}
}
