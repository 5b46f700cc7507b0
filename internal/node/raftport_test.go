package node

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock/internal/tlsconfig"
	"github.com/fencelock/fencelock/internal/tlsconfig/tlstest"
)

// The raft port's budgets (issue 24, item 3): connections past them are
// closed at accept, counted, and summed up in few log lines.

// countingHandler counts the records logged through it.
type countingHandler struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r)
	return nil
}
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countingHandler) WithGroup(string) slog.Handler      { return h }
func (h *countingHandler) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.recs)
}

// testStream is a raft port stream on a free loopback port whose
// accepted connections are held by a stand-in for raft until the test
// closes them.
type testStream struct {
	*RaftPort
	mu       sync.Mutex
	accepted []net.Conn
}

func startStream(t *testing.T, r *tlsconfig.Reloader, lim RaftPortLimits, h slog.Handler) *testStream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gate := newPortGate(lim, slog.New(h))
	var peer PeerTLS // nil: plain TCP
	if r != nil {
		peer = r
	}
	ts := &testStream{RaftPort: newStream(ln, peer, func(string) bool { return true }, gate)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ts.Accept()
			if err != nil {
				return
			}
			ts.mu.Lock()
			ts.accepted = append(ts.accepted, c)
			ts.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ts.Close()
		<-done
	})
	return ts
}

// dial opens a TCP connection to the stream that sends nothing.
func (ts *testStream) dial(t *testing.T) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", ts.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// closedByServer reports whether the server closed c: a read ends with
// EOF (or a reset) rather than the deadline, a failsafe only.
func closedByServer(t *testing.T, c net.Conn) bool {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func nodeReloader(t *testing.T) (*tlsconfig.Reloader, *tlstest.CA) {
	t.Helper()
	ca := tlstest.NewCA(t, "ca")
	f := tlstest.Write(t, t.TempDir(), "n1", ca, ca.Issue(t, "n1"))
	r, err := tlsconfig.Load(tlsconfig.Files{CertFile: f.Cert, KeyFile: f.Key, CAFile: f.CA})
	if err != nil {
		t.Fatal(err)
	}
	return r, ca
}

func TestRaftPortHandshakeBudget(t *testing.T) {
	r, ca := nodeReloader(t)
	h := &countingHandler{}
	ts := startStream(t, r, RaftPortLimits{MaxConns: 8, MaxHandshakes: 3, MaxHandshakesPerAddr: 3, HandshakeTimeout: time.Hour}, h)
	silent := []net.Conn{ts.dial(t), ts.dial(t), ts.dial(t)}
	waitFor(t, "three handshakes in progress", func() bool { return ts.gate.stats().Handshaking == 3 })
	for range 20 {
		if c := ts.dial(t); !closedByServer(t, c) {
			t.Fatal("a connection past the handshake budget was kept")
		}
	}
	if st := ts.gate.stats(); st.RefusedHandshakeBudget != 20 || st.Handshaking != 3 {
		t.Fatalf("stats %+v, want 20 refused for the budget, 3 handshaking", st)
	}
	if n := h.count(); n != 1 {
		t.Errorf("%d log lines for 20 refusals within %v, want 1", n, refusalLogEvery)
	}
	// A peer gets in once a silent dialer gives up.
	silent[0].Close()
	waitFor(t, "a handshake slot", func() bool { return ts.gate.stats().Handshaking == 2 })
	c, err := tls.Dial("tcp", ts.Addr().String(), &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{ca.Issue(t, "n2").TLS(t)}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitFor(t, "the peer admitted", func() bool { return ts.gate.stats().Open == 1 })
}

func TestRaftPortHandshakesPerAddress(t *testing.T) {
	r, _ := nodeReloader(t)
	ts := startStream(t, r, RaftPortLimits{MaxHandshakes: 16, MaxHandshakesPerAddr: 2, HandshakeTimeout: time.Hour}, &countingHandler{})
	ts.dial(t)
	ts.dial(t)
	waitFor(t, "two handshakes in progress", func() bool { return ts.gate.stats().Handshaking == 2 })
	if c := ts.dial(t); !closedByServer(t, c) {
		t.Fatal("a third handshake from one address was kept")
	}
	if st := ts.gate.stats(); st.RefusedHandshakeBudget != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// A silent TLS dialer is cut at the handshake timeout and counted.
func TestRaftPortHandshakeTimeout(t *testing.T) {
	r, _ := nodeReloader(t)
	ts := startStream(t, r, RaftPortLimits{HandshakeTimeout: 50 * time.Millisecond}, &countingHandler{})
	if c := ts.dial(t); !closedByServer(t, c) {
		t.Fatal("a silent dialer was kept past the handshake timeout")
	}
	waitFor(t, "the refusal counted", func() bool { return ts.gate.stats().HandshakesRefused == 1 })
}

// Without TLS the port caps the connections raft holds; one closed
// gives its slot back.
func TestRaftPortConnectionCap(t *testing.T) {
	ts := startStream(t, nil, RaftPortLimits{MaxConns: 2}, &countingHandler{})
	ts.dial(t)
	ts.dial(t)
	waitFor(t, "two connections held", func() bool { return ts.gate.stats().Open == 2 })
	if c := ts.dial(t); !closedByServer(t, c) {
		t.Fatal("a connection past the cap was kept")
	}
	if st := ts.gate.stats(); st.RefusedConns != 1 {
		t.Fatalf("stats %+v", st)
	}
	ts.mu.Lock()
	ts.accepted[0].Close()
	ts.mu.Unlock()
	waitFor(t, "the slot back", func() bool { return ts.gate.stats().Open == 1 })
	c := ts.dial(t)
	waitFor(t, "the new connection held", func() bool { return ts.gate.stats().Open == 2 })
	c.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
	if _, err := c.Read(make([]byte, 1)); errors.Is(err, io.EOF) {
		t.Fatal("the connection after a slot came back was closed")
	}
}

// With TLS, a node that completed its handshake past the cap is closed
// too.
func TestRaftPortConnectionCapWithTLS(t *testing.T) {
	r, ca := nodeReloader(t)
	ts := startStream(t, r, RaftPortLimits{MaxConns: 1}, &countingHandler{})
	cfg := &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{ca.Issue(t, "n2").TLS(t)}}
	first, err := tls.Dial("tcp", ts.Addr().String(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	waitFor(t, "one connection held", func() bool { return ts.gate.stats().Open == 1 })
	second, err := tls.Dial("tcp", ts.Addr().String(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	if !closedByServer(t, second) {
		t.Fatal("a node's connection past the cap was kept")
	}
	if st := ts.gate.stats(); st.RefusedConns != 1 || st.Open != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// The refusal lines are spaced by refusalLogEvery on the gate's clock,
// each saying how many it sums up.
func TestRaftPortRefusalLogIsASummary(t *testing.T) {
	h := &countingHandler{}
	g := newPortGate(RaftPortLimits{}, slog.New(h))
	now := time.Unix(1000, 0)
	g.now = func() time.Time { return now }
	for range 1000 {
		g.refused(&g.refusedConns, "refused", "127.0.0.1:1", nil)
	}
	if n := h.count(); n != 1 {
		t.Fatalf("%d lines for 1000 refusals at one instant, want 1", n)
	}
	now = now.Add(refusalLogEvery)
	g.refused(&g.refusedConns, "refused", "127.0.0.1:1", nil)
	if n := h.count(); n != 2 {
		t.Fatalf("%d lines after %v, want 2", n, refusalLogEvery)
	}
	var summed int64
	h.recs[1].Attrs(func(a slog.Attr) bool {
		if a.Key == "refused" {
			summed = a.Value.Int64()
		}
		return true
	})
	if summed != 1000 {
		t.Errorf("the second line sums up %d refusals, want 1000 (999 unlogged and itself)", summed)
	}
	if st := g.stats(); st.RefusedConns != 1001 {
		t.Errorf("counted %d, want 1001", st.RefusedConns)
	}
}
