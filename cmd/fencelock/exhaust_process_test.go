package main

import (
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestServerProcessSurvivesFDExhaustion: a server whose open-file limit is
// 200, with small log segments, takes writes while 300 idle connections
// try to use up its descriptors. It once failed the next log rotation
// (too many open files), sealed the log and answered every later write
// 503, even after the connections closed. Now the connections over the
// cap are refused at accept, every write is acknowledged, and every
// acknowledged grant is still held.
func TestServerProcessSurvivesFDExhaustion(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	addr := freeAddr(t)
	p := startProcVia(t, t.TempDir(), []string{"FENCELOCK_TEST_WAL_SEGMENT_SIZE=65536"},
		[]string{"sh", "-c", `ulimit -n 200 && exec "$@"`, "sh"}, "--listen", addr, "--data", "d")
	p.waitReady(addr)
	// The writer's keep-alive connection is open before the flood, as a
	// running client's would be.
	mustCall(t, addr, "POST", "/v1/acquire", `{"key":"fd/before","holder":"h","ttl_ms":600000}`)

	var idle []net.Conn
	defer func() {
		for _, c := range idle {
			c.Close()
		}
	}()
	for range 300 {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			break // the backlog is full: the point is made
		}
		idle = append(idle, c)
	}

	// About 600 entries fill a 64 KiB segment: 1500 writes rotate it twice.
	acked := map[string]uint64{}
	failed := 0
	var lastErr string
	for i := range 1500 {
		key := fmt.Sprintf("fd/%d", i)
		r, err := call(addr, "POST", "/v1/acquire", `{"key":"`+key+`","holder":"h","ttl_ms":600000}`)
		switch {
		case err != nil:
			failed, lastErr = failed+1, err.Error()
		case r.status != 200:
			failed, lastErr = failed+1, fmt.Sprint(r.status, r.body)
		default:
			acked[key] = token(r)
		}
	}
	for _, c := range idle {
		c.Close()
	}
	idle = nil
	if failed > 0 {
		t.Errorf("%d of 1500 writes failed under the connection flood; last: %s", failed, lastErr)
	}

	// With the flood gone the server takes writes (bounded poll).
	var r reply
	var err error
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		r, err = call(addr, "POST", "/v1/acquire", `{"key":"fd/after","holder":"h","ttl_ms":60000}`)
		if err == nil && r.status == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no write acknowledged after the connections closed: %v %v\n%s", r, err, p.stderr.String())
		}
	}
	for key, tok := range acked {
		g := mustCall(t, addr, "GET", "/v1/lock?key="+key, "")
		if g.status != 200 || token(g) != tok {
			t.Fatalf("acknowledged grant %s token %d: now %d %v", key, tok, g.status, g.body)
		}
	}

	m := metricsText(t, addr)
	if v := metricValue(m, "fencelock_connections_refused_total"); v <= 0 {
		t.Errorf("fencelock_connections_refused_total = %v, want > 0", v)
	}
	if !strings.Contains(p.stderr.String(), "refusing client connections: at the connection cap") {
		t.Errorf("no log line for the refused connections:\n%s", p.stderr.String())
	}
}

func metricValue(text, name string) float64 {
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\S+)$`).FindStringSubmatch(text)
	if m == nil {
		return -1
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}
