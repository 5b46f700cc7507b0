package server

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/api"
)

// unfinishedHeaders is a request whose headers come to size bytes and
// never end: the server keeps what it read of them until
// ReadHeaderTimeout.
func unfinishedHeaders(size int) []byte {
	var b strings.Builder
	b.WriteString("GET " + api.PathHealth + " HTTP/1.1\r\nHost: 127.0.0.1\r\n")
	for i := 0; b.Len() < size; i++ {
		line := "X-Pad-" + strconv.Itoa(i) + ": " + strings.Repeat("a", 1000) + "\r\n"
		if b.Len()+len(line) > size {
			line = "X-Pad-end: " + strings.Repeat("a", max(size-b.Len()-13, 0)) + "\r\n"
		}
		b.WriteString(line)
	}
	return []byte(b.String())
}

// dialFrom dials addr from the loopback address src (127.0.0.0/8 is all
// loopback on Linux), so that one test can be several remote addresses.
func dialFrom(t *testing.T, src, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Skipf("dialing from %s (needs the whole of 127.0.0.0/8 as loopback): %v", src, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Issue 41, item 4: 4,000 requests with 60 KiB of headers that never end,
// from one address, held 367 MB of a node before any handler ran (so
// before authentication), and /healthz stopped answering. Now what a
// request's headers hold past their first 4 KiB comes from a budget of
// its address and of the server: the connection that finds no room is
// answered 503 too_many_connections and closed, small requests are
// served from every address (the attacker's too), and what the headers
// held goes back when their connections close.
func TestHeaderBytesBeingReadAreBudgetedPerAddressAndInAll(t *testing.T) {
	const perAddr, total = 200 << 10, 300 << 10
	addr := serveForTest(t, Config{HeaderBudgetPerAddr: perAddr, HeaderBudget: total})
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 20 * time.Second}
	get := func(path string) (int, string) {
		resp, err := hc.Get("http://" + addr + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	held := func() (bytes, refused float64) {
		_, m := get(api.PathMetrics)
		return metricValue(m, "fencelock_http_header_bytes_held"), metricValue(m, "fencelock_http_header_budget_refused_total")
	}
	eventually(t, "the server to serve its metrics", func() bool { b, r := held(); return b == 0 && r == 0 })

	big := unfinishedHeaders(60 << 10)
	charge := float64(len(big) - headerFree) // every byte is read: the headers never end
	// send writes big on a new connection from src and waits for the
	// server to have read it: it holds charge more bytes, or it refused
	// the connection, whose answer is returned.
	send := func(src string) (net.Conn, string) {
		b0, r0 := held()
		c := dialFrom(t, src, addr)
		if _, err := c.Write(big); err != nil {
			t.Fatal(err)
		}
		var b, r float64
		eventually(t, "the server to read the headers", func() bool {
			b, r = held()
			return b == b0+charge || r == r0+1
		})
		if r == r0 {
			return c, ""
		}
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		answer, _ := io.ReadAll(bufio.NewReader(c))
		return c, string(answer)
	}

	// 200 KiB from one address: three such requests, not a fourth.
	var kept []net.Conn
	for i := range 3 {
		c, refused := send("127.0.0.2")
		if refused != "" {
			t.Fatalf("request %d of 127.0.0.2, within its budget, was refused: %q", i+1, refused)
		}
		kept = append(kept, c)
	}
	_, refused := send("127.0.0.2")
	if !strings.HasPrefix(refused, "HTTP/1.1 503") || !strings.Contains(refused, `"code":"`+api.CodeTooManyConns+`"`) {
		t.Fatalf("the fourth request of 127.0.0.2 was answered %q, want 503 %s", refused, api.CodeTooManyConns)
	}
	// The attacker's own small requests are served.
	c := dialFrom(t, "127.0.0.2", addr)
	if _, err := c.Write([]byte("GET " + api.PathHealth + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	if line, err := bufio.NewReader(c).ReadString('\n'); !strings.HasPrefix(line, "HTTP/1.1 200") {
		t.Fatalf("/healthz from 127.0.0.2 at its budget: %q %v", line, err)
	}

	// 300 KiB in all: another address gets the two that fit.
	for i := range 2 {
		c, refused := send("127.0.0.3")
		if refused != "" {
			t.Fatalf("request %d of 127.0.0.3 was refused with the server's budget not spent: %q", i+1, refused)
		}
		kept = append(kept, c)
	}
	if _, refused := send("127.0.0.3"); !strings.HasPrefix(refused, "HTTP/1.1 503") {
		t.Fatalf("a request past the server's budget was answered %q, want 503", refused)
	}
	if st, _ := get(api.PathHealth); st != 200 {
		t.Fatalf("/healthz with the server's budget spent: %d", st)
	}

	// Closed, they give it back.
	for _, c := range kept {
		c.Close()
	}
	eventually(t, "the header bytes to be given back", func() bool { b, _ := held(); return b == 0 })
	if _, refused := send("127.0.0.2"); refused != "" {
		t.Fatalf("after the others closed, a request of 127.0.0.2 was refused: %q", refused)
	}
}
