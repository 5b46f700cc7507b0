package fencetest_test

// Finding 3 of issue 43 with real processes: a fencelock server is
// stopped with SIGSTOP while a newcomer's token is being verified, on
// every adapter (the Guard, the RWGuard, the file fence, SQLite,
// PostgreSQL, MySQL/MariaDB, Redis, and fence-proxy as a process). The current holder's writes
// keep landing while the newcomer waits for the stopped server; the
// newcomer is refused as unavailable (the service was not asked in time)
// once the verification's timeout has run; nobody, SQLite's other
// writers included, gets an error for it.

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/fence"
	"github.com/fencelock/fencelock/fence/filefence"
	"github.com/fencelock/fencelock/fence/mysqlfence"
	"github.com/fencelock/fencelock/fence/pgfence"
	"github.com/fencelock/fencelock/fence/redisfence"
	"github.com/fencelock/fencelock/fence/sqlitefence"
	"github.com/fencelock/fencelock/internal/mysqltest"
	"github.com/fencelock/fencelock/internal/pgtest"
	"github.com/fencelock/fencelock/internal/redistest"
	"github.com/fencelock/fencelock/internal/testports"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

func TestMain(m *testing.M) { pgtest.Main(mysqltest.Around(redistest.Around(m))) }

var (
	buildOnce sync.Once
	binary    string
	buildErr  error
)

// fencelockBinary builds cmd/fencelock once; under -short it skips.
func fencelockBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("process tier (a fencelock server stopped with SIGSTOP): skipped by -short")
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "fencetest-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binary = filepath.Join(dir, "fencelock")
		if out, err := exec.Command("go", "build", "-o", binary, "github.com/fencelock/fencelock/cmd/fencelock").CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binary
}

// server is a fencelock server process the test can stop and continue.
type server struct {
	addr string
	cmd  *exec.Cmd
}

func startServer(t *testing.T) *server {
	t.Helper()
	bin := fencelockBinary(t)
	addr := testports.Loopback(t)
	var stderr strings.Builder
	cmd := exec.Command(bin, "server", "--listen", addr, "--data", filepath.Join(t.TempDir(), "data"))
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGCONT)
		cmd.Process.Kill()
		<-done
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return &server{addr: addr, cmd: cmd}
			}
		}
		select {
		case <-done:
			t.Fatalf("fencelock server exited: %s", stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("fencelock server not ready: %v %s", err, stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop stops the server with SIGSTOP and returns once the kernel says
// it is stopped (the signal is delivered asynchronously).
func (s *server) stop(t *testing.T) {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stat := fmt.Sprintf("/proc/%d/stat", s.cmd.Process.Pid)
	deadline := time.Now().Add(hangGuard)
	for {
		b, err := os.ReadFile(stat)
		if err != nil {
			t.Fatal(err)
		}
		// pid (comm) STATE ...: comm may hold spaces, so after the last ')'.
		if f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:])); len(f) > 0 && f[0] == "T" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server did not stop: %s", b)
		}
		time.Sleep(time.Millisecond)
	}
}

func (s *server) cont(t *testing.T) {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
}

// held asks the real service, then holds its answer until released, so
// that the test decides when the newcomer is answered; it says when it
// has been asked and how long the service took to answer.
type held struct {
	v       fence.Verifier
	live    uint64 // the holder's token, answered at once
	asked   chan struct{}
	release chan struct{}
	once    sync.Once
	took    time.Duration
}

func (h *held) Verify(ctx context.Context, key string, token uint64) error {
	if token == h.live {
		return h.v.Verify(ctx, key, token)
	}
	h.asked <- struct{}{}
	start := time.Now()
	err := h.v.Verify(ctx, key, token)
	h.took = time.Since(start)
	<-h.release
	return err
}

func (h *held) let() { h.once.Do(func() { close(h.release) }) }

// hangGuard bounds a wait for something that, with the rule kept,
// happens at once: it decides a failure, never a pass.
const hangGuard = 30 * time.Second

func TestStalledServerStallsNoAdapter(t *testing.T) {
	srv := startServer(t)
	c, err := client.New([]string{srv.addr})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	lease, err := c.Grant(ctx, "stall/k", "holder", 10*time.Minute, 0)
	if err != nil {
		t.Fatal(err)
	}
	holder := lease.Token

	pool := newPool(t)
	sqlitePath := filepath.Join(t.TempDir(), "stall.db")
	adapters := []struct {
		name string
		open func(v *fence.Verification) fence.Fence
		// others is a write by someone else than the fence, made while
		// the newcomer waits (SQLite: a plain write to the database)
		others func() error
	}{
		{"Guard", func(v *fence.Verification) fence.Fence { return fence.NewGuard(fence.WithVerification(v)) }, nil},
		{"RWGuard", func(v *fence.Verification) fence.Fence { return fence.NewRWGuard(fence.WithVerification(v)) }, nil},
		{"filefence", func(v *fence.Verification) fence.Fence {
			f, err := filefence.Open(t.TempDir(), filefence.WithVerification(v))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { f.Close() })
			return f
		}, nil},
		{"sqlitefence", func(v *fence.Verification) fence.Fence {
			db := openSQLite(t, sqlitePath)
			f, err := sqlitefence.New(db, "", sqlitefence.WithVerification(v))
			if err != nil {
				t.Fatal(err)
			}
			if err := f.CreateTable(ctx); err != nil {
				t.Fatal(err)
			}
			return f
		}, func() error {
			_, err := openSQLite(t, sqlitePath).Exec("INSERT INTO other (note) VALUES ('not fenced')")
			return err
		}},
		{"pgfence", func(v *fence.Verification) fence.Fence { return pgfence.New(pool, pgfence.WithVerification(v)) }, nil},
		{"mysqlfence", func(v *fence.Verification) fence.Fence {
			return mysqlfence.New(newMySQL(t), mysqlfence.WithVerification(v))
		}, nil},
		{"redisfence", func(v *fence.Verification) fence.Fence {
			c := redisfence.NewClient(redistest.Addr(t))
			t.Cleanup(func() { c.Close() })
			return redisAdmitter{redisfence.New(c, redisfence.WithVerification(v),
				redisfence.WithMarkKey(func(r string) string { return "fencelock:mark:{stall:" + r + "}" }))}
		}, nil},
	}
	for _, a := range adapters {
		t.Run(a.name, func(t *testing.T) {
			h := &held{v: client.NewVerifier(c), live: holder, asked: make(chan struct{}, 1), release: make(chan struct{})}
			f := a.open(&fence.Verification{Verifier: h, Key: func(string) string { return "stall/k" }})
			t.Cleanup(h.let)
			wrote := 0
			write := func(context.Context) error { wrote++; return nil }
			for _, r := range []string{"r", "other"} {
				if err := f.Admit(ctx, r, holder, write); err != nil {
					t.Fatalf("the holder's first write to %s: %v", r, err)
				}
			}

			srv.stop(t)
			defer srv.cont(t)
			newcomer := make(chan error, 1)
			ran := false
			go func() {
				newcomer <- f.Admit(ctx, "r", holder+100, func(context.Context) error { ran = true; return nil })
			}()
			select {
			case <-h.asked:
			case err := <-newcomer:
				t.Fatalf("the newcomer was not verified: %v", err)
			case <-time.After(hangGuard):
				t.Fatal("the newcomer never reached the verifier")
			}
			for i, r := range []string{"r", "other", "r"} {
				done := make(chan error, 1)
				go func() { done <- f.Admit(ctx, r, holder, write) }()
				select {
				case err := <-done:
					if err != nil {
						t.Fatalf("the holder's write %d to %s, the server stopped: %v", i+1, r, err)
					}
				case <-time.After(hangGuard):
					t.Fatalf("the holder's write %d to %s waited behind the newcomer", i+1, r)
				}
			}
			if a.others != nil {
				if err := a.others(); err != nil {
					t.Fatalf("another writer of the database, the server stopped: %v", err)
				}
			}
			select {
			case err := <-newcomer:
				t.Fatalf("the newcomer was answered (%v) before its verifier", err)
			default:
			}
			h.let()
			err := <-newcomer
			var ue *fence.UnavailableError
			if !errors.As(err, &ue) || ue.Timeout != fence.DefaultVerifyTimeout || ran {
				t.Fatalf("the newcomer: %v (effect ran %v)", err, ran)
			}
			if wrote != 5 {
				t.Fatalf("%d of the holder's 5 writes landed", wrote)
			}
			t.Logf("the stopped server was given up on after %v (--verify-timeout %v): %v", h.took.Round(time.Millisecond), fence.DefaultVerifyTimeout, err)
		})
	}
}

func openSQLite(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sqlitefence.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := db.Exec("CREATE TABLE IF NOT EXISTS other (note TEXT)"); err != nil {
		t.Fatal(err)
	}
	return db
}

func newPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	dsn := pgtest.DB(t, func(ctx context.Context, admin, stmt string) error {
		conn, err := pgx.Connect(ctx, admin)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, stmt)
		return err
	})
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := pgfence.CreateTable(context.Background(), pool, pgfence.DefaultTable); err != nil {
		t.Fatal(err)
	}
	return pool
}

// newMySQL is a pool on a fresh MariaDB database with a fence table.
func newMySQL(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", mysqltest.DB(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := mysqlfence.CreateTable(context.Background(), db, mysqlfence.DefaultTable); err != nil {
		t.Fatal(err)
	}
	return db
}

// redisAdmitter is redisfence as a fence.Fence: a write with no ops
// checks and raises the mark alone, and the effect runs after the script
// (a Go effect cannot run inside it).
type redisAdmitter struct{ f *redisfence.Fence }

func (a redisAdmitter) Admit(ctx context.Context, resource string, token uint64, effect func(context.Context) error) error {
	if _, err := a.f.Write(ctx, resource, token); err != nil {
		return err
	}
	return effect(ctx)
}

// tap is a TCP relay between fence-proxy and the server that says when
// bytes go to the server after it is armed: the proxy's question about a
// newcomer's token is on its way.
type tap struct {
	addr  string
	mu    sync.Mutex
	armed chan struct{}
}

func newTap(t *testing.T, to string) *tap {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tp := &tap{addr: ln.Addr().String()}
	var conns sync.WaitGroup
	t.Cleanup(func() { ln.Close(); conns.Wait() })
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", to)
			if err != nil {
				in.Close()
				continue
			}
			conns.Add(2)
			go func() {
				defer conns.Done()
				io.Copy(in, out)
				in.Close()
			}()
			go func() {
				defer conns.Done()
				buf := make([]byte, 32<<10)
				for {
					n, err := in.Read(buf)
					if n > 0 {
						tp.saw()
						out.Write(buf[:n])
					}
					if err != nil {
						out.Close()
						return
					}
				}
			}()
			t.Cleanup(func() { in.Close(); out.Close() })
		}
	}()
	return tp
}

// arm returns a channel closed at the next bytes to the server.
func (tp *tap) arm() <-chan struct{} {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	tp.armed = make(chan struct{})
	return tp.armed
}

func (tp *tap) saw() {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	if tp.armed != nil {
		close(tp.armed)
		tp.armed = nil
	}
}

// startProxy runs fence-proxy as a process and answers its URL.
func startProxy(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(fencelockBinary(t), append([]string{"fence-proxy", "--listen", "127.0.0.1:0", "--state", t.TempDir()}, args...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("fence-proxy said nothing: %v %s", err, stderr.String())
	}
	_, rest, _ := strings.Cut(line, "listening on ")
	return strings.TrimSuffix(strings.Fields(rest)[0], ",")
}

type answer struct {
	status int
	code   string
	body   string
}

func put(ctx context.Context, url string, token uint64) (answer, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, url, strings.NewReader("x"))
	req.Header.Set(fence.Header, strconv.FormatUint(token, 10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m struct{ Code string }
	_ = json.Unmarshal(b, &m)
	return answer{resp.StatusCode, m.Code, string(b)}, nil
}

// The proxy as a process, verifying through a tap: with the server
// stopped and a newcomer's question on its way, the holder's requests
// are forwarded; and a newcomer is answered 503 fence_unavailable once
// --verify-timeout has run.
func TestStalledServerStallsNoProxy(t *testing.T) {
	srv := startServer(t)
	c, err := client.New([]string{srv.addr})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	lease, err := c.Grant(ctx, "stall/k", "holder", 10*time.Minute, 0)
	if err != nil {
		t.Fatal(err)
	}
	holder := lease.Token
	var mu sync.Mutex
	var applied []string
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		applied = append(applied, r.URL.Path+" "+r.Header.Get(fence.Header))
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	defer upstream.Close()
	tp := newTap(t, srv.addr)
	// A long --verify-timeout: the newcomer waits while the holder writes.
	waiting := startProxy(t, "--upstream", upstream.URL, "--verify", tp.addr, "--lock-key", "stall/k", "--verify-timeout", "10m")
	// The default --verify-timeout: the newcomer is refused within it.
	bounded := startProxy(t, "--upstream", upstream.URL, "--verify", srv.addr, "--lock-key", "stall/k")
	for _, p := range []string{waiting, bounded} {
		for _, r := range []string{"/r", "/other"} {
			if got, err := put(ctx, p+r, holder); err != nil || got.status != 204 {
				t.Fatalf("the holder's first write to %s%s: %v %v", p, r, got, err)
			}
		}
	}

	srv.stop(t)
	defer srv.cont(t)
	asked := tp.arm()
	nctx, cancel := context.WithCancel(ctx)
	defer cancel()
	newcomer := make(chan error, 1)
	go func() {
		_, err := put(nctx, waiting+"/r", holder+100)
		newcomer <- err
	}()
	select {
	case <-asked:
	case err := <-newcomer:
		t.Fatalf("the newcomer was answered: %v", err)
	case <-time.After(hangGuard):
		t.Fatal("the newcomer's question never left the proxy")
	}
	for i, r := range []string{"/r", "/other", "/r"} {
		done := make(chan answer, 1)
		go func() {
			got, err := put(ctx, waiting+r, holder)
			if err != nil {
				got.body = err.Error()
			}
			done <- got
		}()
		select {
		case got := <-done:
			if got.status != 204 {
				t.Fatalf("the holder's write %d to %s, the server stopped: %+v", i+1, r, got)
			}
		case <-time.After(hangGuard):
			t.Fatalf("the holder's write %d to %s waited behind the newcomer", i+1, r)
		}
	}
	select {
	case err := <-newcomer:
		t.Fatalf("the newcomer was answered (%v) before the server", err)
	default:
	}
	cancel()
	<-newcomer

	start := time.Now()
	got, err := put(ctx, bounded+"/r", holder+100)
	took := time.Since(start)
	if err != nil || got.status != 503 || got.code != "fence_unavailable" || !strings.Contains(got.body, "within 2s") {
		t.Fatalf("the newcomer at the bounded proxy: %+v %v", got, err)
	}
	t.Logf("the bounded proxy refused the newcomer after %v: %s", took.Round(time.Millisecond), strings.TrimSpace(got.body))
	mu.Lock()
	defer mu.Unlock()
	if n := len(applied); n != 7 {
		t.Fatalf("the upstream applied %q, want the holder's 7 writes", applied)
	}
}
