//go:build unix

package main

// The page's zombie against a real PostgreSQL, with real processes: holder A
// (this example) takes the lock from a real `fencelock server` with a 1s
// TTL, checks its lease, and is frozen with SIGSTOP before it writes. B
// waits for the lock, which the server grants once A's lease has run out,
// and commits its balance. A is thawed and writes with its old token: with
// the fence, PostgreSQL refuses it (stale token) and B's row survives;
// without the fence, A's write overwrites B's. Every step waits for an
// observed event (a line, an exit), bounded; no sleep decides anything.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencelock/fencelock/internal/pgtest"
	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var (
	buildOnce          sync.Once
	ledgerBin, lockBin string
	buildErr           error
)

func binaries(t *testing.T) (ledger, fencelock string) {
	t.Helper()
	if testing.Short() {
		t.Skip("process tier (runs pgledger and fencelock processes on a real PostgreSQL): skipped by -short")
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "pgledger-bin-")
		if err != nil {
			buildErr = err
			return
		}
		ledgerBin, lockBin = filepath.Join(dir, "pgledger"), filepath.Join(dir, "fencelock")
		for bin, pkg := range map[string]string{ledgerBin: ".", lockBin: "github.com/fencelock/fencelock/cmd/fencelock"} {
			if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
				buildErr = fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return ledgerBin, lockBin
}

func createDB(ctx context.Context, admin, stmt string) error {
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, stmt)
	return err
}

// startServer runs a one-node `fencelock server` on a free port.
func startServer(t *testing.T, bin string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	dir := t.TempDir()
	var stderr bytes.Buffer
	cmd := exec.Command(bin, "server", "--listen", addr, "--data", filepath.Join(dir, "data"))
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-done })
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return addr
			}
		}
		select {
		case <-done:
			t.Fatalf("fencelock server exited: %s", stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("fencelock server not ready at %s: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond) // polling for readiness, not deciding correctness
	}
}

type proc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	stderr bytes.Buffer
	done   chan struct{}
}

func start(t *testing.T, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(bin, args...), lines: make(chan string, 16), done: make(chan struct{})}
	p.cmd.Stderr = &p.stderr
	var err error
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
	}()
	go func() { <-read; p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.cmd.Process.Signal(syscall.SIGCONT)
		p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

func (p *proc) line(t *testing.T, prefix string) string {
	t.Helper()
	select {
	case l := <-p.lines:
		if !strings.HasPrefix(l, prefix) {
			t.Fatalf("%v: line %q, want %q...; stderr %s", p.cmd.Args, l, prefix, p.stderr.String())
		}
		return l
	case <-p.done:
		t.Fatalf("%v exited before printing %q: %s", p.cmd.Args, prefix, p.stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("%v printed no %q", p.cmd.Args, prefix)
	}
	return ""
}

func (p *proc) exit(t *testing.T) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("%v did not exit: %s", p.cmd.Args, p.stderr.String())
	}
	return p.cmd.ProcessState.ExitCode()
}

func TestZombieRefusedByPostgres(t *testing.T) {
	ledger, fencelock := binaries(t)
	addr := startServer(t, fencelock)
	for _, fenced := range []bool{true, false} {
		t.Run(map[bool]string{true: "fenced", false: "no-fence"}[fenced], func(t *testing.T) {
			dsn := pgtest.DB(t, createDB)
			if out, err := exec.Command(ledger, "init", "--dsn", dsn).CombinedOutput(); err != nil {
				t.Fatalf("init: %v\n%s", err, out)
			}
			account := "acct-" + t.Name()[len("TestZombieRefusedByPostgres/"):]
			common := []string{"--dsn", dsn, "--addr", addr, "--account", account}
			if !fenced {
				common = append(common, "--no-fence")
			}

			a := start(t, ledger, append([]string{"write", "--balance", "100", "--ttl", "1s", "--holder", "A", "--pause"}, common...)...)
			var tokA, tokB uint64
			fmt.Sscanf(a.line(t, "acquired token "), "acquired token %d", &tokA)
			a.line(t, "lease checked, paused before the write")
			// A has checked its lease and waits to write: freeze it there.
			if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}

			// B waits in the queue until A's lease runs out (A cannot
			// extend while frozen), then commits.
			b := start(t, ledger, append([]string{"write", "--balance", "200", "--ttl", "10s", "--wait", "30s", "--holder", "B"}, common...)...)
			fmt.Sscanf(b.line(t, "acquired token "), "acquired token %d", &tokB)
			b.line(t, "wrote balance 200")
			if code := b.exit(t); code != 0 {
				t.Fatalf("B exited %d: %s", code, b.stderr.String())
			}
			if tokB <= tokA {
				t.Fatalf("B's token %d is not above A's %d", tokB, tokA)
			}

			// Thaw A and let it write with its old token.
			if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			io.WriteString(a.stdin, "go\n")
			code := a.exit(t)

			show, err := exec.Command(ledger, "show", "--dsn", dsn, "--account", account).CombinedOutput()
			if err != nil {
				t.Fatalf("show: %v\n%s", err, show)
			}
			got := strings.TrimSpace(string(show))
			if fenced {
				want := fmt.Sprintf("pgledger: fence: stale fencing token %d for %q: token %d has already been honoured", tokA, "ledger/"+account, tokB)
				if code != 1 || strings.TrimSpace(a.stderr.String()) != want {
					t.Fatalf("A exited %d with %q, want 1 with %q", code, a.stderr.String(), want)
				}
				if w := fmt.Sprintf("balance 200 writer B token %d", tokB); got != w {
					t.Fatalf("after A's refused write: %q, want B's row %q", got, w)
				}
			} else {
				if code != 0 {
					t.Fatalf("A exited %d: %s", code, a.stderr.String())
				}
				if w := fmt.Sprintf("balance 100 writer A token %d", tokA); got != w {
					t.Fatalf("without the fence: %q, want A's stale write %q over B's", got, w)
				}
			}
			t.Logf("A token %d, B token %d: A exit %d %s; row: %s", tokA, tokB, code, strings.TrimSpace(a.stderr.String()), got)
		})
	}
}

// TestUsage: -h, at the top and after a command, prints usage and exits 0
// (it said unknown command "-h"); an unknown command is refused before the
// database is asked for. No database is needed.
func TestUsage(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"--help"}, {"help"}, {"write", "-h"}} {
		var out bytes.Buffer
		if err := run(context.Background(), args, strings.NewReader(""), &out); err != nil {
			t.Errorf("%q: %v", args, err)
		}
		if !strings.Contains(out.String(), "Usage: pgledger") {
			t.Errorf("%q printed %q", args, out.String())
		}
	}
	var out bytes.Buffer
	err := run(context.Background(), []string{"frob", "--dsn", "postgres://nowhere"}, strings.NewReader(""), &out)
	var xe *exitError
	if !errors.As(err, &xe) || xe.code != 2 || !strings.Contains(err.Error(), `unknown command "frob"`) {
		t.Errorf("frob: %v", err)
	}
}
