package server

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/framing"
)

// serveForTest runs Serve on a loopback port until the test ends.
func serveForTest(t *testing.T, cfg Config) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = 50*time.Millisecond, 50*time.Millisecond, 50*time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, ln, cfg, 5*time.Second) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return ln.Addr().String()
}

// prefaced opens a connection and sends the framed preface; it returns the
// connection and the first line the server answered (the preface echoed,
// or an HTTP status line).
func prefaced(t *testing.T, addr string) (net.Conn, *bufio.Reader, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.Write([]byte(framing.Preface)); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	line, err := br.ReadString('\n')
	if err != nil {
		t.Fatalf("reading the answer to the preface: %q %v", line, err)
	}
	return c, br, line
}

// One remote address gets a quarter of the connection cap by default; the
// next connection from it is answered 503 too_many_connections and
// counted (before, one host could take every connection).
func TestConnectionsPerAddressAreCapped(t *testing.T) {
	addr := serveForTest(t, Config{MaxConnections: 8}) // 2 per address
	a, _, first := prefaced(t, addr)
	_, _, second := prefaced(t, addr)
	if first != framing.Preface || second != framing.Preface {
		t.Fatalf("the first two connections were answered %q and %q", first, second)
	}
	_, br, third := prefaced(t, addr)
	if !strings.HasPrefix(third, "HTTP/1.1 503") {
		t.Fatalf("a third connection from one address was answered %q; want 503", third)
	}
	rest, _ := io.ReadAll(br)
	if !strings.Contains(string(rest), `"code":"`+api.CodeTooManyConns+`"`) {
		t.Fatalf("the refusal does not carry the code: %q", rest)
	}
	// A slot given back is taken again; the refusal was counted.
	a.Close()
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	var metrics string
	eventually(t, "a freed slot serves /metrics", func() bool {
		resp, err := hc.Get("http://" + addr + api.PathMetrics)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		metrics = string(b)
		return resp.StatusCode == http.StatusOK
	})
	// At least the third connection was refused (a /metrics call that
	// came before the slot was back was refused too, and retried).
	for _, name := range []string{"fencelock_connections_refused_total", "fencelock_connections_refused_per_address_total"} {
		if v := metricValue(metrics, name); v < 1 {
			t.Errorf("%s = %v; want >= 1", name, v)
		}
	}
	for _, want := range []string{
		"fencelock_connections_max_per_address 2",
		"fencelock_framed_pending_answer_bytes 0",
	} {
		if !strings.Contains(metrics, want+"\n") {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// metricValue is the value of an unlabelled metric in a /metrics text, or
// -1 when it is missing.
func metricValue(text, name string) float64 {
	for _, l := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err == nil {
				return f
			}
		}
	}
	return -1
}

// A framed client refused at a cap is told the server is busy, not that
// it speaks only HTTP (which the client would remember for good).
func TestRefusedFramedDialIsNotHTTPOnly(t *testing.T) {
	addr := serveForTest(t, Config{MaxConnections: 4}) // 1 per address
	prefaced(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := framing.Dial(ctx, addr)
	if !errors.Is(err, framing.ErrRefused) {
		t.Fatalf("Dial at the cap = %v; want ErrRefused", err)
	}
}
