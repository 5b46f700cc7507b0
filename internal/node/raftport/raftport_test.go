package raftport

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

	"github.com/fencelock/fencelock/internal/clustersecret"
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
	*Port
	mu       sync.Mutex
	accepted []net.Conn
}

func startStream(t *testing.T, r *tlsconfig.Reloader, lim Limits, h slog.Handler) *testStream {
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
	ts := &testStream{Port: newStream(ln, peer, func(string) bool { return true }, gate, Frames{})}
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
	return err != nil && !isTimeout(err)
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

// With the handshake budget spent, a new connection makes room: the
// oldest handshake is closed and counted, the newcomer kept. So a peer
// gets in however many silent dialers hold the budget.
func TestRaftPortHandshakeBudget(t *testing.T) {
	r, ca := nodeReloader(t)
	h := &countingHandler{}
	ts := startStream(t, r, Limits{MaxConns: 8, MaxHandshakes: 3, HandshakeTimeout: time.Hour}, h)
	silent := []net.Conn{ts.dial(t), ts.dial(t), ts.dial(t)}
	waitFor(t, "three handshakes in progress", func() bool { return ts.gate.stats().Handshaking == 3 })
	for i := range 20 {
		ts.dial(t)
		waitFor(t, "a handshake evicted", func() bool { return ts.gate.stats().Evicted == int64(i+1) })
	}
	for i, c := range silent {
		if !closedByServer(t, c) {
			t.Fatalf("silent dialer %d, the oldest, was kept", i)
		}
	}
	if st := ts.gate.stats(); st.Evicted != 20 || st.Handshaking != 3 {
		t.Fatalf("stats %+v, want 20 evicted, 3 handshaking", st)
	}
	if n := h.count(); n != 1 {
		t.Errorf("%d log lines for 20 evictions within %v, want 1", n, refusalLogEvery)
	}
	c, err := tls.Dial("tcp", ts.Addr().String(), &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{ca.Issue(t, "n2").TLS(t)}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitFor(t, "the peer admitted", func() bool { return ts.gate.stats().Open == 1 })
}

// dialFrom opens a silent TCP connection to ts from the loopback
// address ip.
func (ts *testStream) dialFrom(t *testing.T, ip string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	c, err := d.Dial("tcp", ts.Addr().String())
	if err != nil {
		t.Skipf("dialing from %s: %v", ip, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// The room is made at the address that holds the most handshakes: a
// dialer's connections close each other, not another address's.
func TestRaftPortEvictsFromTheBusiestAddress(t *testing.T) {
	r, _ := nodeReloader(t)
	ts := startStream(t, r, Limits{MaxHandshakes: 4, HandshakeTimeout: time.Hour}, &countingHandler{})
	peer := ts.dialFrom(t, "127.0.0.1")
	for range 3 {
		ts.dialFrom(t, "127.0.0.2")
	}
	waitFor(t, "four handshakes in progress", func() bool { return ts.gate.stats().Handshaking == 4 })
	for i := range 10 {
		ts.dialFrom(t, "127.0.0.2")
		waitFor(t, "a handshake evicted", func() bool { return ts.gate.stats().Evicted == int64(i+1) })
	}
	// A second connection from the quiet address is let in, at the
	// busy one's expense; then, the two even, the busy one's newcomers
	// close its own.
	ts.dialFrom(t, "127.0.0.1")
	waitFor(t, "one more evicted", func() bool { return ts.gate.stats().Evicted == 11 })
	for i := range 5 {
		ts.dialFrom(t, "127.0.0.2")
		waitFor(t, "a handshake evicted", func() bool { return ts.gate.stats().Evicted == int64(12+i) })
	}
	peer.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := peer.Read(make([]byte, 1)); !isTimeout(err) {
		t.Fatalf("the quiet address's first connection was closed (%v)", err)
	}
	ts.gate.mu.Lock()
	n1, n2 := len(ts.gate.byAddr["127.0.0.1"]), len(ts.gate.byAddr["127.0.0.2"])
	ts.gate.mu.Unlock()
	if n1 != 2 || n2 != 2 {
		t.Fatalf("handshakes by address: 127.0.0.1 %d, 127.0.0.2 %d; want 2 and 2", n1, n2)
	}
}

// secretStream is a stream whose credential is a cluster secret's.
func secretStream(t *testing.T, lim Limits) (*testStream, *clustersecret.Credential) {
	t.Helper()
	s, err := clustersecret.New()
	if err != nil {
		t.Fatal(err)
	}
	cred, err := clustersecret.NewCredential(s, nil, "n1")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ts := &testStream{Port: newStream(ln, cred, func(string) bool { return true }, newPortGate(lim, slog.New(&countingHandler{})), Frames{})}
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
	return ts, cred
}

// With a cluster secret, a dialer proves it in its first bytes: the port
// spends its handshakes on those that do, which silent connections
// cannot evict, and cuts one that sends none within proofTimeout (or
// another secret's) before any TLS.
func TestRaftPortProofOfTheSecret(t *testing.T) {
	ts, cred := secretStream(t, Limits{MaxHandshakes: 4, HandshakeTimeout: time.Hour})
	// A holder of the secret whose TLS handshake stalls after its proof.
	member, err := net.Dial("tcp", ts.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer member.Close()
	proof, err := cred.Proof()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := member.Write(proof); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the proven handshake", func() bool {
		ts.gate.mu.Lock()
		defer ts.gate.mu.Unlock()
		return len(ts.gate.byAddr) == 0 && ts.gate.stats().Handshaking == 1
	})
	for i := range 10 {
		ts.dial(t)
		if i >= 3 {
			waitFor(t, "a silent one evicted", func() bool { return ts.gate.stats().Evicted == int64(i-2) })
		}
	}
	member.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := member.Read(make([]byte, 1)); !isTimeout(err) {
		t.Fatalf("the proven handshake was closed (%v)", err)
	}
	// A connection that proves nothing within proofTimeout is cut and
	// counted; so is another secret's proof, at once.
	start := time.Now()
	if c := ts.dial(t); !closedByServer(t, c) {
		t.Fatal("a silent dialer was kept")
	}
	if d := time.Since(start); d > proofTimeout+5*time.Second {
		t.Errorf("a silent dialer was cut after %v", d)
	}
	other, _ := clustersecret.New()
	oc, _ := clustersecret.NewCredential(other, nil, "n2")
	bad, _ := oc.Proof()
	c := ts.dial(t)
	c.Write(bad)
	if !closedByServer(t, c) {
		t.Fatal("another secret's proof was kept")
	}
	waitFor(t, "the refusals counted", func() bool { return ts.gate.stats().HandshakesRefused >= 2 })
	// The real thing: a peer dialing with the credential gets in.
	pc, err := dialPeer(context.Background(), oc, ts.Addr().String(), nil)
	if err == nil {
		pc.Close()
	}
	c2, err := dialPeer(context.Background(), cred, ts.Addr().String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	waitFor(t, "the peer admitted", func() bool { return ts.gate.stats().Open == 1 })
}

// A silent TLS dialer is cut at the handshake timeout and counted.
func TestRaftPortHandshakeTimeout(t *testing.T) {
	r, _ := nodeReloader(t)
	ts := startStream(t, r, Limits{HandshakeTimeout: 50 * time.Millisecond}, &countingHandler{})
	if c := ts.dial(t); !closedByServer(t, c) {
		t.Fatal("a silent dialer was kept past the handshake timeout")
	}
	waitFor(t, "the refusal counted", func() bool { return ts.gate.stats().HandshakesRefused == 1 })
}

// Without TLS the port caps the connections raft holds; one closed
// gives its slot back.
func TestRaftPortConnectionCap(t *testing.T) {
	ts := startStream(t, nil, Limits{MaxConns: 2}, &countingHandler{})
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
	ts := startStream(t, r, Limits{MaxConns: 1}, &countingHandler{})
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
	g := newPortGate(Limits{}, slog.New(h))
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

// When every handshake in progress proved the secret (only holders of
// it, or replays of their proofs, get there), there is no room to make:
// a newcomer is closed, counted, and the proven ones are left alone.
func TestRaftPortProvenHandshakesAreNotEvicted(t *testing.T) {
	ts, cred := secretStream(t, Limits{MaxHandshakes: 2, HandshakeTimeout: time.Hour})
	var proven []net.Conn
	for range 2 {
		c := ts.dial(t)
		p, err := cred.Proof()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write(p); err != nil {
			t.Fatal(err)
		}
		proven = append(proven, c)
	}
	waitFor(t, "two proven handshakes", func() bool {
		ts.gate.mu.Lock()
		defer ts.gate.mu.Unlock()
		return len(ts.gate.byAddr) == 0 && ts.gate.stats().Handshaking == 2
	})
	if c := ts.dial(t); !closedByServer(t, c) {
		t.Fatal("a newcomer was kept past a budget of proven handshakes")
	}
	if st := ts.gate.stats(); st.Evicted != 1 || st.Handshaking != 2 {
		t.Fatalf("stats %+v, want 1 closed for the budget, 2 handshaking", st)
	}
	for _, c := range proven {
		c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		if _, err := c.Read(make([]byte, 1)); !isTimeout(err) {
			t.Fatalf("a proven handshake was closed (%v)", err)
		}
	}
}
