//go:build unix

package main

// The page's split-brain scenario with real processes: holder A runs under
// `fencelock lock`, writes to a store, and is frozen with SIGSTOP past its
// TTL; B acquires and writes; A is thawed and writes again. With the fence,
// A's late write is refused and B's value stands; without it, A's stale
// write wins. Every step waits for an observed event (a file, an exit, the
// store's state), bounded, never for a sleep.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	storeOnce sync.Once
	storeBin  string
	storeErr  error
)

// fencedStoreBinary builds examples/fencedstore next to the fencelock
// binary, once per test process.
func fencedStoreBinary(t *testing.T) string {
	t.Helper()
	dir := filepath.Dir(fencelockBinary(t))
	storeOnce.Do(func() {
		storeBin = filepath.Join(dir, "fencedstore")
		out, err := exec.Command("go", "build", "-o", storeBin, "../../examples/fencedstore").CombinedOutput()
		if err != nil {
			storeErr = fmt.Errorf("building fencedstore: %v\n%s", err, out)
		}
	})
	if storeErr != nil {
		t.Fatal(storeErr)
	}
	return storeBin
}

// startStore runs `fencedstore serve` on a free port and returns its URL.
func startStore(t *testing.T, fenced bool) string {
	t.Helper()
	args := []string{"serve", "--listen", "127.0.0.1:0"}
	if !fenced {
		args = append(args, "--no-fence")
	}
	cmd := exec.Command(fencedStoreBinary(t), args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("fencedstore said nothing: %v", err)
	}
	go io.Copy(io.Discard, stdout)
	_, rest, ok := strings.Cut(line, "listening on ")
	if !ok {
		t.Fatalf("fencedstore: unexpected first line %q", line)
	}
	return strings.Fields(rest)[0]
}

type storedValue struct {
	Value string `json:"value"`
	Token uint64 `json:"token"`
}

func readStore(t *testing.T, url string) storedValue {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v storedValue
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return v
}

// waitStopped waits, bounded, until every thread of pid is stopped, as
// /proc shows it; without /proc (not Linux) it returns at once, and there
// fencelock does not watch its CMD's stops either.
func waitStopped(t *testing.T, pid int) {
	t.Helper()
	tasks := fmt.Sprintf("/proc/%d/task", pid)
	if _, err := os.Stat(tasks); err != nil {
		return
	}
	eventually(t, fmt.Sprintf("every thread of %d to stop", pid), func() bool {
		stats, _ := filepath.Glob(tasks + "/*/stat")
		for _, p := range stats {
			b, err := os.ReadFile(p)
			if err != nil {
				return false
			}
			// The state follows the parenthesized command name.
			_, rest, _ := strings.Cut(string(b), ") ")
			if !strings.HasPrefix(rest, "T") && !strings.HasPrefix(rest, "t") {
				return false
			}
		}
		return len(stats) > 0
	})
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// bgProc is a process whose end is awaited by a goroutine.
type bgProc struct {
	cmd    *exec.Cmd
	stderr syncBuffer
	done   chan struct{}
}

func startBG(t *testing.T, dir string, env []string, args ...string) *bgProc {
	t.Helper()
	p := &bgProc{cmd: exec.Command(fencelockBinary(t), args...), done: make(chan struct{})}
	p.cmd.Dir = dir
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stderr = &p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.cmd.Process.Signal(syscall.SIGCONT)
		p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

func (p *bgProc) exitCode(t *testing.T) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("%v did not exit; stderr %q", p.cmd.Args, p.stderr.String())
	}
	return p.cmd.ProcessState.ExitCode()
}

// aScript is holder A's CMD: write, report, wait for the go-ahead (it will
// have been frozen meanwhile), write again and record put's exit status.
const aScript = `
echo $$ > child.pid
"$FS" put "$STORE" "A:$FENCELOCK_TOKEN" > /dev/null || exit 10
touch wrote
while [ ! -e go ]; do sleep 0.01; done
"$FS" put "$STORE" "A-late:$FENCELOCK_TOKEN" > /dev/null 2> late.err
echo $? > late
`

func TestSplitBrain(t *testing.T) {
	t.Parallel()
	srvDir := t.TempDir()
	addr := freeAddr(t)
	startProc(t, srvDir, nil, "--listen", addr, "--data", filepath.Join(srvDir, "data")).waitReady(addr)
	fs := fencedStoreBinary(t)

	for _, tc := range []struct {
		name   string
		fenced bool
	}{{"fenced", true}, {"unfenced", false}} {
		t.Run(tc.name, func(t *testing.T) {
			store := startStore(t, tc.fenced) + "/v/x"
			key := "splitbrain/" + tc.name
			dir := t.TempDir()
			env := []string{"FS=" + fs, "STORE=" + store}

			// A takes the lock and writes.
			a := startBG(t, dir, env, "lock", key, "--addr", addr, "--holder", "A", "--ttl", "1500ms", "--", "sh", "-c", aScript)
			eventually(t, "A's first write", func() bool { return fileExists(filepath.Join(dir, "wrote")) })
			first := readStore(t, store)
			if !strings.HasPrefix(first.Value, "A:") {
				t.Fatalf("after A's write the store holds %+v", first)
			}
			tokenA := first.Token

			// Freeze A's machine: fencelock and its CMD's process group,
			// which its watchdog leads (a VM paused whole). None of them
			// can extend, notice, kill or write: this is what only the
			// fence helps against.
			pidb, err := os.ReadFile(filepath.Join(dir, "child.pid"))
			if err != nil {
				t.Fatal(err)
			}
			child, err := strconv.Atoi(strings.TrimSpace(string(pidb)))
			if err != nil {
				t.Fatal(err)
			}
			if err := syscall.Kill(a.cmd.Process.Pid, syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			// fencelock ends the hold when it sees its CMD stop, which it
			// would if a thread of it were still running when CMD stops:
			// kill returns before every thread has taken the signal, the
			// later the busier the machine.
			waitStopped(t, a.cmd.Process.Pid)
			group, err := syscall.Getpgid(child)
			if err != nil {
				t.Fatal(err)
			}
			if err := syscall.Kill(-group, syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { syscall.Kill(-group, syscall.SIGCONT); syscall.Kill(-group, syscall.SIGKILL) })

			// B waits in the queue; A's lease expires on the server; B gets
			// the key and writes. B's exit is the event that says so.
			b := startBG(t, dir, env, "lock", key, "--addr", addr, "--holder", "B", "--ttl", "10s", "--wait", "20s", "--",
				"sh", "-c", `"$FS" put "$STORE" "B:$FENCELOCK_TOKEN" > /dev/null`)
			if code := b.exitCode(t); code != 0 {
				t.Fatalf("B: exit %d; stderr %q", code, b.stderr.String())
			}
			afterB := readStore(t, store)
			if afterB.Value != fmt.Sprintf("B:%d", afterB.Token) || afterB.Token <= tokenA {
				t.Fatalf("after B the store holds %+v; A's token was %d", afterB, tokenA)
			}

			// The machine thaws, and A's CMD runs a few instructions
			// before anything else does: it writes with its stale token.
			// (Its watchdog, the group's leader, stays frozen until then.)
			if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			for _, pid := range groupMembers(group) {
				if pid != group {
					_ = syscall.Kill(pid, syscall.SIGCONT)
				}
			}
			eventually(t, "A's late write", func() bool {
				b, _ := os.ReadFile(filepath.Join(dir, "late"))
				return strings.HasSuffix(string(b), "\n")
			})
			late, _ := os.ReadFile(filepath.Join(dir, "late"))
			lateErr, _ := os.ReadFile(filepath.Join(dir, "late.err"))
			final := readStore(t, store)
			if tc.fenced {
				if strings.TrimSpace(string(late)) != "1" || !strings.Contains(string(lateErr), "409 stale_token") {
					t.Fatalf("A's stale write was not refused: put exit %q, stderr %q", late, lateErr)
				}
				if final != afterB {
					t.Fatalf("final value %+v, want B's %+v", final, afterB)
				}
			} else {
				if strings.TrimSpace(string(late)) != "0" {
					t.Fatalf("without the fence A's write should succeed: put exit %q, stderr %q", late, lateErr)
				}
				if final.Value != fmt.Sprintf("A-late:%d", tokenA) {
					t.Fatalf("final value %+v, want A's stale write to have won", final)
				}
			}

			// Thaw the watchdog and fencelock A: it finds its lease lost
			// and exits 4.
			_ = syscall.Kill(group, syscall.SIGCONT)
			if err := syscall.Kill(a.cmd.Process.Pid, syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			if code := a.exitCode(t); code != exitLost {
				t.Fatalf("A: exit %d, want %d; stderr %q", code, exitLost, a.stderr.String())
			}
			if !strings.Contains(a.stderr.String(), "lost") {
				t.Fatalf("A did not say it lost the lease: %q", a.stderr.String())
			}
		})
	}
}
