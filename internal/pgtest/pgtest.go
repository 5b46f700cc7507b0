// Package pgtest gives tests a real PostgreSQL server: a throwaway cluster
// started for the test binary (initdb into a temporary directory, a free
// 127.0.0.1 port and a unix socket in that directory, run as an unprivileged
// user when the test runs as root, since PostgreSQL refuses root), or an
// existing server named by FENCELOCK_TEST_PG_DSN.
//
// A package's TestMain calls Main; its tests call DB for a fresh database of
// their own. Where no server can be had, DB fails the test with a message
// saying how to provide one: the tests never skip silently. They belong to
// the process tier: under -short Main starts no server and DB skips the
// test, saying so.
package pgtest

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// EnvDSN names an existing server for the tests instead of a throwaway
// cluster. Its user must be allowed to CREATE DATABASE.
const EnvDSN = "FENCELOCK_TEST_PG_DSN"

// EnvUser names the unprivileged user that runs the throwaway cluster when
// the tests run as root (default: postgres if it exists, else nobody).
const EnvUser = "FENCELOCK_TEST_PG_USER"

const howTo = "the tests need a real PostgreSQL: install Debian's postgresql package " +
	"(apt-get install -y postgresql; .ci/run does this) so that initdb and pg_ctl are under " +
	"/usr/lib/postgresql/*/bin, or set " + EnvDSN + " to a server whose user may CREATE DATABASE " +
	"(e.g. " + EnvDSN + "='postgres://me@127.0.0.1:5432/postgres?sslmode=disable')"

var (
	adminDSN string // the server's maintenance database
	startErr error
	dbSeq    atomic.Int64
	started  time.Duration
)

// Main starts the server (unless EnvDSN is set), runs the tests and stops it.
// Use it as a package's TestMain: func TestMain(m *testing.M) { pgtest.Main(m) }.
// m may be another test server package's Around(m), for tests that need
// that server too.
func Main(m interface{ Run() int }) {
	flag.Parse() // testing.Short needs the flags
	var stop func()
	if testing.Short() {
		os.Exit(m.Run())
	}
	if dsn := os.Getenv(EnvDSN); dsn != "" {
		adminDSN = dsn
	} else {
		t0 := time.Now()
		adminDSN, stop, startErr = startCluster()
		started = time.Since(t0)
	}
	code := m.Run()
	if stop != nil {
		stop()
	}
	os.Exit(code)
}

// StartTime is how long the throwaway cluster took to start (0 with EnvDSN).
func StartTime() time.Duration { return started }

// AdminDSN is the DSN of the server's maintenance database; it fails the
// test if there is no server.
func AdminDSN(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("process tier (a real PostgreSQL server): skipped by -short")
	}
	if adminDSN == "" && startErr == nil {
		t.Fatalf("pgtest: Main did not run (the package needs func TestMain(m *testing.M) { pgtest.Main(m) })")
	}
	if startErr != nil {
		t.Fatalf("pgtest: no PostgreSQL server: %v\n%s", startErr, howTo)
	}
	return adminDSN
}

// DB creates a fresh database for the test and returns its DSN (a URL).
// create runs the CREATE DATABASE statement over some connection of the
// caller's (so this package needs no driver): DB passes it the maintenance
// DSN and the statement.
func DB(t testing.TB, create func(ctx context.Context, adminDSN, stmt string) error) string {
	t.Helper()
	admin := AdminDSN(t)
	name := fmt.Sprintf("t%d_%d", os.Getpid(), dbSeq.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := create(ctx, admin, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("pgtest: create database %s on %s: %v\n%s", name, admin, err, howTo)
	}
	dsn, err := withDB(admin, name)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return dsn
}

// withDB replaces the database in a URL or keyword/value DSN.
func withDB(dsn, name string) (string, error) {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", fmt.Errorf("parse %s: %v", EnvDSN, err)
		}
		u.Path = "/" + name
		return u.String(), nil
	}
	return dsn + " dbname=" + name, nil // the last keyword wins
}

// binDir finds the newest /usr/lib/postgresql/N/bin with initdb and pg_ctl.
func binDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, d := range dirs {
		if isExec(filepath.Join(d, "initdb")) && isExec(filepath.Join(d, "pg_ctl")) {
			return d, nil
		}
	}
	for _, name := range []string{"initdb", "pg_ctl"} {
		if _, err := exec.LookPath(name); err != nil {
			return "", errors.New("initdb and pg_ctl not found under /usr/lib/postgresql/*/bin or on PATH")
		}
	}
	p, _ := exec.LookPath("initdb")
	return filepath.Dir(p), nil
}

func version(dir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
	return n
}

func isExec(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode()&0o111 != 0
}

// runAs returns a command that runs as the unprivileged user when we are
// root, and as ourselves otherwise.
func runAs(ctx context.Context, who string, name string, args ...string) *exec.Cmd {
	if who == "" {
		return exec.CommandContext(ctx, name, args...)
	}
	return exec.CommandContext(ctx, "runuser", append([]string{"-u", who, "--", name}, args...)...)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startCluster initdbs and starts a cluster, bounded to a minute in all.
func startCluster() (dsn string, stop func(), err error) {
	bin, err := binDir()
	if err != nil {
		return "", nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	dir, err := os.MkdirTemp("", "fencelock-pgtest-")
	if err != nil {
		return "", nil, err
	}
	var who string
	if os.Geteuid() == 0 {
		who = os.Getenv(EnvUser)
		if who == "" {
			who = "nobody"
			if _, err := user.Lookup("postgres"); err == nil {
				who = "postgres"
			}
		}
		u, err := user.Lookup(who)
		if err != nil {
			os.RemoveAll(dir)
			return "", nil, fmt.Errorf("running as root, and user %q (%s) does not exist: %v", who, EnvUser, err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			os.RemoveAll(dir)
			return "", nil, err
		}
	}
	data := filepath.Join(dir, "data")
	logf := filepath.Join(dir, "postgres.log")
	fail := func(step string, out []byte, err error) (string, func(), error) {
		log, _ := os.ReadFile(logf)
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("%s: %v\n%s\n%s", step, err, out, log)
	}
	out, err := runAs(ctx, who, filepath.Join(bin, "initdb"), "-D", data, "-U", "fencelock",
		"--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions").CombinedOutput()
	if err != nil {
		return fail("initdb", out, err)
	}
	var port int
	for attempt := 0; ; attempt++ {
		if port, err = freePort(); err != nil {
			return fail("free port", nil, err)
		}
		opts := fmt.Sprintf("-c listen_addresses=127.0.0.1 -c port=%d -c unix_socket_directories=%s "+
			"-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c shared_buffers=16MB "+
			"-c max_connections=100 -c log_min_messages=warning", port, dir)
		out, err = runAs(ctx, who, filepath.Join(bin, "pg_ctl"), "-D", data, "-l", logf,
			"-w", "-t", "45", "-o", opts, "start").CombinedOutput()
		if err == nil {
			break
		}
		if attempt == 2 || ctx.Err() != nil {
			return fail("pg_ctl start", out, err)
		}
	}
	stop = func() {
		sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer scancel()
		_ = runAs(sctx, who, filepath.Join(bin, "pg_ctl"), "-D", data, "-m", "immediate", "-w", "stop").Run()
		os.RemoveAll(dir)
	}
	return fmt.Sprintf("postgres://fencelock@127.0.0.1:%d/postgres?sslmode=disable", port), stop, nil
}
