//go:build unix

package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
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
	t.Parallel()
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

// TestServerProcessRecoversFromFullDisk: on a 1 MiB tmpfs, a server fills
// the disk until its log cannot open its next segment. Writes are then
// answered 507 no_space (not not_leader); once space is freed the server
// takes writes again by itself, without a restart, and every
// acknowledged grant is still held. Before, the log stayed sealed until
// a restart. Needs root to mount the tmpfs; skipped otherwise.
func TestServerProcessRecoversFromFullDisk(t *testing.T) {
	fencelockBinary(t) // skips under -short, before anything is mounted
	t.Parallel()
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a small tmpfs for a full disk (needs root): %v %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v %s", mnt, err, out)
		}
	})
	addr := freeAddr(t)
	// Frequent snapshots: a log compaction while the rotation failure
	// stood used to record the sealed segment as the open one, and then
	// not even a restart could append.
	args := []string{"--listen", addr, "--data", "d", "--snapshot-threshold", "200", "--trailing-logs", "10", "--snapshot-interval", "200ms"}
	env := []string{"FENCELOCK_TEST_WAL_SEGMENT_SIZE=131072"}
	p := startProc(t, mnt, env, args...)
	p.waitReady(addr)
	t.Cleanup(func() { p.cmd.Process.Kill(); <-p.done }) // before the umount

	// Leave less room than one 128 KiB segment.
	var st syscall.Statfs_t
	if err := syscall.Statfs(mnt, &st); err != nil {
		t.Fatal(err)
	}
	filler := filepath.Join(mnt, "filler")
	if err := os.WriteFile(filler, make([]byte, int64(st.Bavail)*int64(st.Bsize)-48<<10), 0o600); err != nil {
		t.Fatal(err)
	}

	acked := map[string]uint64{}
	var full reply
	for i := 0; i < 5000 && full.status == 0; i++ {
		key := fmt.Sprintf("disk/%d", i)
		r := mustCall(t, addr, "POST", "/v1/acquire", `{"key":"`+key+`","holder":"h","ttl_ms":600000}`)
		switch r.status {
		case 200:
			acked[key] = token(r)
		case 507:
			full = r
		}
	}
	if full.status != 507 || full.body["code"] != "no_space" {
		t.Fatalf("a full disk never answered 507 no_space (last %v)\n%s", full, p.stderr.String())
	}
	if r := mustCall(t, addr, "POST", "/v1/acquire", `{"key":"disk/more","holder":"h","ttl_ms":1000}`); r.status != 507 {
		t.Errorf("the next write on a full disk: %d %v, want 507", r.status, r.body)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	var r reply
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if r = mustCall(t, addr, "POST", "/v1/acquire", `{"key":"disk/after","holder":"h","ttl_ms":60000}`); r.status == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no write acknowledged after the space came back: %v\n%s", r, p.stderr.String())
		}
	}
	// Snapshots and compactions run again (more than the threshold of
	// writes); then a kill -9 and a restart on the same data.
	for i := range 400 {
		key := fmt.Sprintf("disk/later/%d", i)
		if r := mustCall(t, addr, "POST", "/v1/acquire", `{"key":"`+key+`","holder":"h","ttl_ms":600000}`); r.status == 200 {
			acked[key] = token(r)
		}
	}
	time.Sleep(500 * time.Millisecond) // let a snapshot and compaction run; correctness does not depend on it
	p.cmd.Process.Kill()
	<-p.done
	p = startProc(t, mnt, env, args...)
	p.waitReady(addr)
	r = mustCall(t, addr, "POST", "/v1/acquire", `{"key":"disk/restarted","holder":"h","ttl_ms":60000}`)
	if r.status != 200 {
		t.Fatalf("a write after the restart: %d %v\n%s", r.status, r.body, p.stderr.String())
	}

	var top uint64
	for key, tok := range acked {
		top = max(top, tok)
		g := mustCall(t, addr, "GET", "/v1/lock?key="+key, "")
		if g.status != 200 || token(g) != tok {
			t.Fatalf("acknowledged grant %s token %d: now %d %v", key, tok, g.status, g.body)
		}
	}
	if token(r) <= top {
		t.Errorf("the first grant after recovery has token %d, not above the last acknowledged %d", token(r), top)
	}
}
