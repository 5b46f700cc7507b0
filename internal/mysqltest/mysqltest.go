// Package mysqltest gives tests a real MariaDB (or MySQL) server: a
// throwaway one started for the test binary (mariadb-install-db into a
// temporary directory, mariadbd on a free 127.0.0.1 port and a unix socket
// in that directory, as the unprivileged mysql user when the tests run as
// root), or an existing server named by FENCELOCK_TEST_MYSQL_DSN.
//
// A package's TestMain calls Main; its tests call DB for a fresh database
// of their own. Where no server can be had, DB fails the test with a
// message saying how to provide one: the tests never skip silently. They
// belong to the process tier: under -short Main starts no server and DB
// skips the test, saying so. Kill and Restart let a test crash the
// throwaway server (SIGKILL) and start it again on the same data and port.
package mysqltest

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fencelock/fencelock/internal/testproc"
	"github.com/go-sql-driver/mysql"
)

// EnvDSN names an existing server for the tests instead of a throwaway
// one, as a go-sql-driver DSN without a database
// (user:password@tcp(host:port)/). Its user must be allowed to CREATE
// DATABASE. Kill and Restart skip their test with it.
const EnvDSN = "FENCELOCK_TEST_MYSQL_DSN"

const howTo = "the tests need a real MariaDB or MySQL: install Debian's mariadb-server package " +
	"(apt-get install -y mariadb-server; .ci/deps does this) so that mariadb-install-db and mariadbd are on PATH, " +
	"or set " + EnvDSN + " to a server whose user may CREATE DATABASE " +
	"(e.g. " + EnvDSN + "='me:secret@tcp(127.0.0.1:3306)/')"

var (
	adminDSN string
	startErr error
	dbSeq    atomic.Int64
	srv      *server
	started  time.Duration
)

// Main starts the server (unless EnvDSN is set), runs the tests and
// stops it. Use it as a package's TestMain.
func Main(m *testing.M) { os.Exit(Around(m).Run()) }

// Runner runs a package's tests: a *testing.M, or what another test
// server package's Around returns.
type Runner interface{ Run() int }

// Around is m with the server started before it runs and stopped after,
// for a package whose tests need more than one kind of server:
// func TestMain(m *testing.M) { pgtest.Main(mysqltest.Around(m)) }.
func Around(m Runner) Runner { return around{m} }

type around struct{ m Runner }

func (a around) Run() int {
	flag.Parse() // testing.Short needs the flags
	if testing.Short() {
		return a.m.Run()
	}
	if dsn := os.Getenv(EnvDSN); dsn != "" {
		adminDSN = dsn
	} else {
		t0 := time.Now()
		srv, startErr = start()
		started = time.Since(t0)
		if startErr == nil {
			adminDSN = srv.dsn()
		}
	}
	defer func() {
		if srv != nil {
			srv.stop()
		}
	}()
	return a.m.Run()
}

// StartTime is how long the throwaway server took to start, its data
// directory made (0 with EnvDSN).
func StartTime() time.Duration { return started }

// AdminDSN is the DSN of the server, with no database; it fails the test
// if there is no server.
func AdminDSN(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("process tier (a real MariaDB server): skipped by -short")
	}
	if adminDSN == "" && startErr == nil {
		t.Fatalf("mysqltest: Main did not run (the package needs func TestMain(m *testing.M) { mysqltest.Main(m) })")
	}
	if startErr != nil {
		t.Fatalf("mysqltest: no MariaDB server: %v\n%s", startErr, howTo)
	}
	return adminDSN
}

// DB creates a fresh database for the test and returns its DSN.
func DB(t testing.TB) string {
	t.Helper()
	admin := AdminDSN(t)
	name := fmt.Sprintf("t%d_%d", os.Getpid(), dbSeq.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := sql.Open("mysql", admin)
	if err != nil {
		t.Fatalf("mysqltest: %v", err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("mysqltest: create database %s: %v\n%s", name, err, howTo)
	}
	cfg, err := mysql.ParseDSN(admin)
	if err != nil {
		t.Fatalf("mysqltest: %s: %v", EnvDSN, err)
	}
	cfg.DBName = name
	return cfg.FormatDSN()
}

// Kill crashes the throwaway server with SIGKILL and waits for it to be
// gone; connections to it fail until Restart. With EnvDSN it skips the
// test (nobody's own server is killed).
func Kill(t testing.TB) {
	t.Helper()
	owned(t).Kill()
}

// Stop freezes the throwaway server with SIGSTOP; Restart or Kill end it.
func Stop(t testing.TB) {
	t.Helper()
	if err := owned(t).Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
}

// Restart starts the server again on the same data directory and port,
// killing it first if it still runs, and waits until it answers (InnoDB's
// crash recovery included).
func Restart(t testing.TB) {
	t.Helper()
	if err := owned(t).Restart(); err != nil {
		t.Fatalf("mysqltest: restart: %v", err)
	}
}

func owned(t testing.TB) *server {
	t.Helper()
	AdminDSN(t)
	if srv == nil {
		t.Skipf("mysqltest: %s names a server of yours; the test kills its server, so it runs only on the throwaway one", EnvDSN)
	}
	return srv
}

type server struct {
	testproc.Server
	dir  string
	port int
	who  *testproc.User
}

func (s *server) dsn() string {
	cfg := mysql.NewConfig()
	cfg.User = "fencelock"
	cfg.Net = "tcp"
	cfg.Addr = fmt.Sprintf("127.0.0.1:%d", s.port)
	return cfg.FormatDSN()
}

func (s *server) socket() string { return filepath.Join(s.dir, "mysqld.sock") }

// start makes a data directory and starts the server, bounded to a
// minute and a half in all; a user fencelock@127.0.0.1 with every
// privilege and no password is created through the socket.
func start() (*server, error) {
	for _, name := range []string{"mariadb-install-db", "mariadbd"} {
		if _, err := lookPath(name); err != nil {
			return nil, err
		}
	}
	who, err := testproc.LookupUser("mysql")
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "fencelock-mysqltest-")
	if err != nil {
		return nil, err
	}
	if err := who.Chown(dir); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s := &server{dir: dir, who: who}
	s.Run = s.run
	install, _ := lookPath("mariadb-install-db")
	cmd := who.Command(install, "--no-defaults", "--datadir="+filepath.Join(dir, "data"),
		"--auth-root-authentication-method=normal", "--skip-test-db", "--skip-name-resolve")
	if out, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("mariadb-install-db: %v\n%s", err, out)
	}
	for attempt := 0; ; attempt++ {
		if s.port, err = testproc.FreePort(); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		if err = s.Start(); err == nil {
			break
		}
		if attempt == 2 {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	root := mysql.NewConfig()
	root.User, root.Net, root.Addr = "root", "unix", s.socket()
	db, err := sql.Open("mysql", root.FormatDSN())
	if err == nil {
		defer db.Close()
		for _, stmt := range []string{
			"CREATE USER IF NOT EXISTS 'fencelock'@'127.0.0.1'",
			"GRANT ALL PRIVILEGES ON *.* TO 'fencelock'@'127.0.0.1' WITH GRANT OPTION",
		} {
			if _, err = db.Exec(stmt); err != nil {
				break
			}
		}
	}
	if err != nil {
		s.stop()
		return nil, fmt.Errorf("creating the test user: %v", err)
	}
	return s, nil
}

// run starts mariadbd and waits until it accepts a connection.
func (s *server) run() (*testproc.Proc, error) {
	bin, _ := lookPath("mariadbd")
	cmd := s.who.Command(bin, "--no-defaults",
		"--datadir="+filepath.Join(s.dir, "data"),
		"--socket="+s.socket(),
		"--pid-file="+filepath.Join(s.dir, "mysqld.pid"),
		"--bind-address=127.0.0.1", fmt.Sprintf("--port=%d", s.port),
		"--skip-name-resolve", "--skip-log-bin",
		"--innodb-buffer-pool-size=32M", "--innodb-log-file-size=16M",
		"--max-connections=200",
		// Durable as a production server is: the crash tests kill it.
		"--innodb-flush-log-at-trx-commit=1",
		"--log-error="+filepath.Join(s.dir, "error.log"))
	p, err := testproc.Start(cmd)
	if err != nil {
		return nil, err
	}
	root := mysql.NewConfig()
	root.User, root.Net, root.Addr = "root", "unix", s.socket()
	root.Timeout = time.Second
	db, err := sql.Open("mysql", root.FormatDSN())
	if err != nil {
		p.Kill()
		return nil, err
	}
	defer db.Close()
	deadline := time.Now().Add(90 * time.Second)
	for {
		err = db.Ping()
		if err == nil {
			return p, nil
		}
		if p.Exited() {
			log, _ := os.ReadFile(filepath.Join(s.dir, "error.log"))
			return nil, fmt.Errorf("%w: mariadbd on port %d: %s\n%s", testproc.ErrExited, s.port, p.Output(), tail(log))
		}
		if time.Now().After(deadline) {
			p.Kill()
			return nil, fmt.Errorf("mariadbd not ready on port %d: %v", s.port, err)
		}
		time.Sleep(20 * time.Millisecond) // polling for readiness, not deciding correctness
	}
}

func (s *server) stop() {
	s.Close()
	os.RemoveAll(s.dir)
}

func tail(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 15 {
		lines = lines[len(lines)-15:]
	}
	return strings.Join(lines, "\n")
}

// lookPath finds name on PATH or in /usr/sbin and /usr/bin (a root
// shell's PATH may lack sbin).
func lookPath(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range []string{"/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin"} {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", errors.New(name + " not found on PATH, /usr/sbin or /usr/bin")
}
