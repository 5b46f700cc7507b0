// Package redistest gives tests a real Redis server: a throwaway one
// started for the test binary (redis-server on a free 127.0.0.1 port, its
// data in a temporary directory, with appendonly yes and appendfsync
// always, as the unprivileged redis user when the tests run as root), or
// an existing server named by FENCELOCK_TEST_REDIS_ADDR.
//
// A package's TestMain calls Main; its tests call Addr. Where no server
// can be had, Addr fails the test saying how to provide one: the tests
// never skip silently. They belong to the process tier: under -short Main
// starts no server and Addr skips the test, saying so. Kill, Stop and
// Restart let a test crash (SIGKILL) or freeze (SIGSTOP) the throwaway
// server and start it again on the same port and data.
package redistest

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencelock/fencelock/internal/testproc"
)

// EnvAddr names an existing server (host:port) for the tests instead of
// a throwaway one. The tests write keys tagged with their names (and
// {doc}, {acct:42}) in its database 0; Kill, Stop and Restart skip their
// test with it.
const EnvAddr = "FENCELOCK_TEST_REDIS_ADDR"

const howTo = "the tests need a real Redis: install Debian's redis-server package " +
	"(apt-get install -y redis-server; .ci/deps does this) so that redis-server is on PATH, " +
	"or set " + EnvAddr + " to a server of yours (e.g. " + EnvAddr + "=127.0.0.1:6379)"

var (
	addr     string
	startErr error
	srv      *server
)

// Main starts the server (unless EnvAddr is set), runs the tests and
// stops it. Use it as a package's TestMain.
func Main(m *testing.M) { os.Exit(Around(m).Run()) }

// Runner runs a package's tests: a *testing.M, or what another test
// server package's Around returns.
type Runner interface{ Run() int }

// Around is m with the server started before it runs and stopped after,
// for a package whose tests need more than one kind of server:
// func TestMain(m *testing.M) { pgtest.Main(redistest.Around(m)) }.
func Around(m Runner) Runner { return around{m} }

type around struct{ m Runner }

func (a around) Run() int {
	flag.Parse() // testing.Short needs the flags
	if testing.Short() {
		return a.m.Run()
	}
	if a := os.Getenv(EnvAddr); a != "" {
		addr = a
	} else {
		srv, startErr = start()
		if startErr == nil {
			addr = srv.addr()
		}
	}
	defer func() {
		if srv != nil {
			srv.stop()
		}
	}()
	return a.m.Run()
}

// Addr is the server's host:port; it fails the test if there is none.
func Addr(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("process tier (a real Redis server): skipped by -short")
	}
	if addr == "" && startErr == nil {
		t.Fatalf("redistest: Main did not run (the package needs func TestMain(m *testing.M) { redistest.Main(m) })")
	}
	if startErr != nil {
		t.Fatalf("redistest: no Redis server: %v\n%s", startErr, howTo)
	}
	return addr
}

// Kill crashes the throwaway server with SIGKILL and waits until it is
// gone. With EnvAddr it skips the test.
func Kill(t testing.TB) {
	t.Helper()
	owned(t).Kill()
}

// Stop freezes the throwaway server with SIGSTOP; Cont thaws it.
func Stop(t testing.TB) {
	t.Helper()
	s := owned(t)
	if err := s.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Signal(syscall.SIGCONT) })
}

// Cont thaws a server Stop froze.
func Cont(t testing.TB) {
	t.Helper()
	if err := owned(t).Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
}

// Restart starts the server again on the same directory and port,
// killing it first if it still runs, and waits until it answers PING (its
// append-only file loaded).
func Restart(t testing.TB) {
	t.Helper()
	if err := owned(t).Restart(); err != nil {
		t.Fatalf("redistest: restart: %v", err)
	}
}

func owned(t testing.TB) *server {
	t.Helper()
	Addr(t)
	if srv == nil {
		t.Skipf("redistest: %s names a server of yours; the test kills or stops its server, so it runs only on the throwaway one", EnvAddr)
	}
	return srv
}

type server struct {
	testproc.Server
	dir  string
	port int
	who  *testproc.User
}

func (s *server) addr() string { return fmt.Sprintf("127.0.0.1:%d", s.port) }

func start() (*server, error) {
	if _, err := lookPath("redis-server"); err != nil {
		return nil, err
	}
	who, err := testproc.LookupUser("redis")
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "fencelock-redistest-")
	if err != nil {
		return nil, err
	}
	if err := who.Chown(dir); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s := &server{dir: dir, who: who}
	s.Run = s.run
	for attempt := 0; ; attempt++ {
		if s.port, err = testproc.FreePort(); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		if err = s.Start(); err == nil {
			return s, nil
		}
		if attempt == 2 {
			os.RemoveAll(dir)
			return nil, err
		}
	}
}

func (s *server) run() (*testproc.Proc, error) {
	bin, _ := lookPath("redis-server")
	cmd := s.who.Command(bin,
		"--port", fmt.Sprint(s.port), "--bind", "127.0.0.1",
		"--dir", s.dir,
		"--appendonly", "yes", "--appendfsync", "always",
		"--save", "",
		"--daemonize", "no", "--logfile", "",
		"--loglevel", "warning")
	p, err := testproc.Start(cmd)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		err = ping(s.addr())
		if err == nil {
			return p, nil
		}
		if p.Exited() {
			return nil, fmt.Errorf("%w: redis-server on port %d: %s", testproc.ErrExited, s.port, p.Output())
		}
		if time.Now().After(deadline) {
			p.Kill()
			return nil, fmt.Errorf("redis-server not ready on port %d: %v", s.port, err)
		}
		time.Sleep(20 * time.Millisecond) // polling for readiness, not deciding correctness
	}
}

// ping sends PING and wants +PONG (not -LOADING).
func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if strings.TrimSpace(line) != "+PONG" {
		return errors.New(strings.TrimSpace(line))
	}
	return nil
}

func (s *server) stop() {
	s.Close()
	os.RemoveAll(s.dir)
}

func lookPath(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range []string{"/usr/bin", "/usr/sbin", "/usr/local/bin"} {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", errors.New(name + " not found on PATH or in /usr/bin")
}
