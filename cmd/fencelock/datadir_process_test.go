package main

import (
	"bytes"
	bin "encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// killedDataDir runs a real server with frequent snapshots under
// concurrent acquires, kills it with -9 once every request has been
// answered (so the last entries of the log are acknowledged grants), and
// returns its data dir and the largest token any client saw acknowledged.
// The log then starts after a compacted prefix, a snapshot covers it, and
// hundreds of grants follow.
func killedDataDir(t *testing.T, clients int) (data string, maxAcked uint64) {
	t.Helper()
	dir := t.TempDir()
	data = filepath.Join(dir, "data")
	addr := freeAddr(t)
	p := startProc(t, dir, nil, "--listen", addr, "--data", data,
		"--snapshot-threshold", "256", "--trailing-logs", "32", "--snapshot-interval", "20ms")
	p.waitReady(addr)
	var (
		mu    sync.Mutex
		acked int
		wg    sync.WaitGroup
		stop  = make(chan struct{})
	)
	enough := make(chan struct{})
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				r, err := call(addr, "POST", "/v1/acquire",
					fmt.Sprintf(`{"key":"own/c%d/%d","holder":"c%d","ttl_ms":600000}`, c, i, c))
				if err != nil {
					return
				}
				if r.status != 200 {
					continue
				}
				mu.Lock()
				maxAcked = max(maxAcked, token(r))
				acked++
				if acked == 1200 {
					close(enough)
				}
				mu.Unlock()
			}
		}()
	}
	select {
	case <-enough:
	case <-time.After(120 * time.Second):
		t.Fatal("the load never reached 1200 grants")
	}
	close(stop)
	wg.Wait()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.done
	snaps, _ := os.ReadDir(filepath.Join(data, "snapshots"))
	if len(snaps) == 0 {
		t.Fatal("the data dir has no snapshot")
	}
	return data, maxAcked
}

// frame is one frame of a raft-wal segment file: type (1 entry, 2 index,
// 3 commit), offset of its header, payload length.
type frame struct {
	typ      byte
	off, len int
}

// segmentFrames walks a segment's frames from its 32-byte header to the
// first all-zero frame header (the end of the written data).
func segmentFrames(t *testing.T, b []byte) (frames []frame, end int) {
	t.Helper()
	off := 32
	for off+8 <= len(b) && b[off] != 0 {
		f := frame{typ: b[off], off: off}
		size := 8
		if f.typ != 3 {
			f.len = int(bin.LittleEndian.Uint32(b[off+4:]))
			size += (f.len + 7) &^ 7
		}
		frames = append(frames, f)
		off += size
	}
	if len(frames) == 0 {
		t.Fatal("segment has no frames")
	}
	return frames, off
}

// tailSegment is the path of the segment being written (the last by name).
func tailSegment(t *testing.T, data string) string {
	t.Helper()
	segs, _ := filepath.Glob(filepath.Join(data, "wal", "*.wal"))
	if len(segs) == 0 {
		t.Fatal("no wal segment")
	}
	sort.Strings(segs)
	return segs[len(segs)-1]
}

// lateEntry is an entry frame of the tail segment, among the last (so
// still in the log, not in its compacted prefix), whose payload holds an
// acquire's key.
func lateEntry(t *testing.T, b []byte, frames []frame) frame {
	t.Helper()
	var keyed []frame
	for _, f := range frames {
		if f.typ == 1 && bytes.Contains(b[f.off+8:f.off+8+f.len], []byte("own/")) {
			keyed = append(keyed, f)
		}
	}
	if len(keyed) < 4 {
		t.Fatalf("only %d acquire entries in the tail segment", len(keyed))
	}
	return keyed[len(keyed)-4]
}

func rewrite(t *testing.T, path string, change func([]byte) []byte) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, change(b), 0o600); err != nil {
		t.Fatal(err)
	}
}

func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "data")
	if out, err := exec.Command("cp", "-a", src, dst).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	return dst
}

// TestDataDirDamageRefusesAndRecovers: each kind of damage to a copy of a
// data dir killed with -9 makes the server refuse to start with one line
// naming the file and the repair (never a panic, never a silent start);
// after `fencelock recover` it starts and its next token is above every
// token acknowledged before the damage.
func TestDataDirDamageRefusesAndRecovers(t *testing.T) {
	t.Parallel()
	src, maxAcked := killedDataDir(t, 4)
	t.Logf("max acknowledged token %d", maxAcked)
	cases := []struct {
		name   string
		damage func(t *testing.T, data string)
		file   string // in the refusal line
	}{
		{"zero the last 10 bytes of the tail segment", func(t *testing.T, data string) {
			rewrite(t, tailSegment(t, data), func(b []byte) []byte {
				_, end := segmentFrames(t, b)
				copy(b[end-10:end], make([]byte, 10))
				return b
			})
		}, ".wal"},
		{"truncate the last 10 bytes of the tail segment", func(t *testing.T, data string) {
			rewrite(t, tailSegment(t, data), func(b []byte) []byte {
				_, end := segmentFrames(t, b)
				return b[:end-10]
			})
		}, ".wal"},
		{"delete the wal segment files", func(t *testing.T, data string) {
			segs, _ := filepath.Glob(filepath.Join(data, "wal", "*.wal"))
			for _, s := range segs {
				os.Remove(s)
			}
		}, "wal"},
		{"flip a byte of a key inside an entry", func(t *testing.T, data string) {
			rewrite(t, tailSegment(t, data), func(b []byte) []byte {
				frames, _ := segmentFrames(t, b)
				f := lateEntry(t, b, frames)
				i := bytes.Index(b[f.off+8:f.off+8+f.len], []byte("own/"))
				b[f.off+8+i+1] ^= 0x01 // "own/" -> "onw/"-like: a different key
				return b
			})
		}, ".wal"},
		{"damage an entry header's type", func(t *testing.T, data string) {
			rewrite(t, tailSegment(t, data), func(b []byte) []byte {
				frames, _ := segmentFrames(t, b)
				b[lateEntry(t, b, frames).off] = 0x7f
				return b
			})
		}, ".wal"},
		{"damage an entry header's length", func(t *testing.T, data string) {
			rewrite(t, tailSegment(t, data), func(b []byte) []byte {
				frames, _ := segmentFrames(t, b)
				f := lateEntry(t, b, frames)
				bin.LittleEndian.PutUint32(b[f.off+4:], uint32(f.len+40))
				return b
			})
		}, ".wal"},
		{"remove the snapshot dir", func(t *testing.T, data string) {
			if err := os.RemoveAll(filepath.Join(data, "snapshots")); err != nil {
				t.Fatal(err)
			}
		}, "snapshots"},
		{"remove raft-wal's meta file", func(t *testing.T, data string) {
			if err := os.Remove(filepath.Join(data, "wal", "wal-meta.db")); err != nil {
				t.Fatal(err)
			}
		}, "wal-meta.db"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // each on its own copy of src
			data := copyDir(t, src)
			tc.damage(t, data)
			dir := filepath.Dir(data)
			addr := freeAddr(t)
			p := startProc(t, dir, nil, "--listen", addr, "--data", data)
			select {
			case <-p.done:
			case <-time.After(30 * time.Second):
				r, _ := call(addr, "POST", "/v1/acquire", `{"key":"probe","holder":"probe","ttl_ms":60000}`)
				t.Fatalf("the server started on a damaged data dir (next token %d, %d acknowledged before)", token(r), maxAcked)
			}
			stderr := p.stderr.String()
			if p.err == nil {
				t.Fatalf("the server exited 0 on a damaged data dir:\n%s", stderr)
			}
			if strings.Contains(stderr, "panic") || strings.Contains(stderr, "goroutine ") {
				t.Fatalf("the server panicked:\n%s", stderr)
			}
			var lines []string
			for _, l := range strings.Split(stderr, "\n") {
				if strings.Contains(l, "is damaged") {
					lines = append(lines, l)
				}
			}
			if len(lines) != 1 || !strings.Contains(lines[0], tc.file) ||
				!strings.Contains(lines[0], "fencelock recover --data "+data) || !strings.HasPrefix(lines[0], "fencelock: ") {
				t.Fatalf("want one refusal line naming %q and the repair, got:\n%s", tc.file, stderr)
			}
			t.Logf("refused: %s", lines[0])

			out, err := exec.Command(fencelockBinary(t), "recover", "--data", data).CombinedOutput()
			if err != nil {
				t.Fatalf("recover: %v\n%s", err, out)
			}
			t.Logf("recover:\n%s", out)
			addr = freeAddr(t)
			p = startProc(t, dir, nil, "--listen", addr, "--data", data)
			p.waitReady(addr)
			r := mustCall(t, addr, "POST", "/v1/acquire", `{"key":"probe","holder":"probe","ttl_ms":60000}`)
			if r.status != 200 || token(r) <= maxAcked {
				t.Fatalf("first token after recover %d, not above the %d acknowledged before: %+v", token(r), maxAcked, r)
			}
			p.cmd.Process.Signal(syscall.SIGTERM)
			if code := p.exitCode(); code != 0 {
				t.Fatalf("exit status %d", code)
			}
			// A second start after the floor was committed is an
			// ordinary restart.
			addr = freeAddr(t)
			p = startProc(t, dir, nil, "--listen", addr, "--data", data)
			p.waitReady(addr)
			r2 := mustCall(t, addr, "POST", "/v1/acquire", `{"key":"probe2","holder":"probe","ttl_ms":60000}`)
			if r2.status != 200 || token(r2) != token(r)+1 {
				t.Fatalf("token after a clean restart %d, want %d", token(r2), token(r)+1)
			}
			p.cmd.Process.Signal(syscall.SIGTERM)
			p.exitCode()
		})
	}
	// The undamaged data dir starts without complaint, and the tokens stay
	// dense: the next one follows the acknowledged ones, short of at most
	// the acquires that were in flight at the kill.
	t.Run("undamaged", func(t *testing.T) {
		t.Parallel()
		data := copyDir(t, src)
		addr := freeAddr(t)
		p := startProc(t, filepath.Dir(data), nil, "--listen", addr, "--data", data)
		p.waitReady(addr)
		r := mustCall(t, addr, "POST", "/v1/acquire", `{"key":"probe","holder":"probe","ttl_ms":60000}`)
		if r.status != 200 || token(r) != maxAcked+1 {
			t.Fatalf("first token after kill -9 %d, want %d (dense)", token(r), maxAcked+1)
		}
		if s := p.stderr.String(); strings.Contains(s, "is damaged") || strings.Contains(s, "ERROR") {
			t.Fatalf("complaints on an undamaged start:\n%s", s)
		}
		p.cmd.Process.Signal(syscall.SIGTERM)
		if code := p.exitCode(); code != 0 {
			t.Fatalf("exit status %d", code)
		}
	})
}
