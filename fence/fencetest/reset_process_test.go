package fencetest_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"os/exec"
	"os/user"
	"strings"
	"testing"

	"github.com/fencelock/fencelock/fence"
	"github.com/fencelock/fencelock/fence/mysqlfence"
	"github.com/fencelock/fencelock/fence/pgfence"
	"github.com/fencelock/fencelock/fence/redisfence"
	"github.com/fencelock/fencelock/internal/mysqltest"
	"github.com/fencelock/fencelock/internal/redistest"
	"github.com/go-sql-driver/mysql"
)

// fenceReset runs 'fencelock fence reset' with args and answers its
// output and exit code.
func fenceReset(t *testing.T, args ...string) (string, int) {
	t.Helper()
	out, err := exec.Command(fencelockBinary(t), append([]string{"fence", "reset"}, args...)...).CombinedOutput()
	var xe *exec.ExitError
	if errors.As(err, &xe) {
		return string(out), xe.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(out), 0
}

func osUser(t *testing.T) string {
	me, err := user.Current()
	if err != nil {
		t.Skipf("no OS user to expect: %v", err)
	}
	return me.Username
}

// Finding 5 of issue 43 in PostgreSQL: a mark was mended with a plain
// UPDATE that nothing recorded. 'fencelock fence reset --sql postgres://'
// lowers it (only), and records who, why and what in fence_resets in the
// same transaction; the live holder writes again.
func TestFenceResetPostgresProcess(t *testing.T) {
	bin := fencelockBinary(t)
	pool := newPool(t)
	ctx := context.Background()
	f := pgfence.New(pool)
	if err := f.Admit(ctx, "ledger/alice", math.MaxInt64, nil); err != nil {
		t.Fatal(err)
	}
	dsn := pool.Config().ConnString()
	if !strings.HasPrefix(dsn, "postgres") {
		t.Skipf("the test server's DSN %q is not a URL", dsn)
	}
	run := func(args ...string) (string, int) {
		out, err := exec.Command(bin, append([]string{"fence", "reset", "--sql", dsn, "--resource", "ledger/alice"}, args...)...).CombinedOutput()
		var xe *exec.ExitError
		if errors.As(err, &xe) {
			return string(out), xe.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return string(out), 0
	}
	if out, code := run("--to", "7", "--reason", "a token typed while testing"); code != 0 ||
		out != `reset "ledger/alice": mark 9223372036854775807 -> 7, last write 9223372036854775807 -> 7 (recorded in fence_resets)`+"\n" {
		t.Fatalf("reset: exit %d %q", code, out)
	}
	if out, code := run("--to", "9", "--reason", "x"); code != 1 || !strings.Contains(out, "--raise") {
		t.Fatalf("a raise without --raise: exit %d %q", code, out)
	}
	if err := f.Admit(ctx, "ledger/alice", 7, nil); err != nil {
		t.Fatalf("the live holder after the reset: %v", err)
	}
	var who, why string
	var before, after int64
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) OVER (), os_user, reason, token_before, token_after FROM fence_resets").Scan(&n, &who, &why, &before, &after); err != nil {
		t.Fatal(err)
	}
	me, _ := user.Current()
	if n != 1 || (me != nil && who != me.Username) || why != "a token typed while testing" || before != math.MaxInt64 || after != 7 {
		t.Fatalf("recorded %d: %q %q %d -> %d", n, who, why, before, after)
	}
	// The library call is the same, and so are its refusals.
	if _, err := f.Reset(ctx, fence.ResetRequest{Resource: "ledger/alice", To: 8, User: "u", Reason: "r"}); !errors.Is(err, fence.ErrResetRaises) {
		t.Fatalf("raise: %v", err)
	}
	if _, err := f.Reset(ctx, fence.ResetRequest{Resource: "nope", To: 1, User: "u", Reason: "r"}); !errors.Is(err, fence.ErrNoMark) {
		t.Fatalf("no mark: %v", err)
	}
	if m, err := f.Reset(ctx, fence.ResetRequest{Resource: "ledger/alice", To: 0, User: "u", Reason: "forget it"}); err != nil || m.Token != 7 {
		t.Fatalf("forget: %+v %v", m, err)
	}
}

// Finding 5 of issue 43 in MySQL/MariaDB: a mark was mended with a plain
// UPDATE that nothing recorded. 'fencelock fence reset --sql mysql://DSN'
// (the driver's DSN, or host:port in it) lowers it, only, and records
// who, why and what in fence_resets in the same transaction; the live
// holder writes again.
func TestFenceResetMySQLProcess(t *testing.T) {
	fencelockBinary(t)
	dsn := mysqltest.DB(t)
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	if err := mysqlfence.CreateTable(ctx, db, mysqlfence.DefaultTable); err != nil {
		t.Fatal(err)
	}
	f := mysqlfence.New(db)
	if err := f.Admit(ctx, "ledger/alice", math.MaxInt64, nil); err != nil {
		t.Fatal(err)
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	hostPort := fmt.Sprintf("mysql://%s@%s/%s", cfg.User, cfg.Addr, cfg.DBName)
	reset := func(dsn string, args ...string) (string, int) {
		return fenceReset(t, append([]string{"--sql", dsn, "--resource", "ledger/alice"}, args...)...)
	}
	if out, code := reset("mysql://"+dsn, "--to", "8", "--reason", "a token typed while testing"); code != 0 ||
		out != `reset "ledger/alice": mark 9223372036854775807 -> 8, last write 9223372036854775807 -> 8 (recorded in fence_resets)`+"\n" {
		t.Fatalf("reset: exit %d %q", code, out)
	}
	if out, code := reset(hostPort, "--to", "9", "--reason", "x"); code != 1 || !strings.Contains(out, "--raise") {
		t.Fatalf("a raise without --raise: exit %d %q", code, out)
	}
	if out, code := reset(hostPort, "--to", "7", "--reason", "one lower"); code != 0 || !strings.Contains(out, "mark 8 -> 7") {
		t.Fatalf("reset through host:port: exit %d %q", code, out)
	}
	if out, code := fenceReset(t, "--sql", hostPort, "--resource", "nope", "--to", "1", "--reason", "x"); code != 1 || !strings.Contains(out, "no mark") {
		t.Fatalf("no such mark: exit %d %q", code, out)
	}
	if out, code := reset(fmt.Sprintf("mysql://%s@%s/", cfg.User, cfg.Addr), "--to", "1", "--reason", "x"); code != 2 || !strings.Contains(out, "no database") {
		t.Fatalf("no database: exit %d %q", code, out)
	}
	if err := f.Admit(ctx, "ledger/alice", 7, nil); err != nil {
		t.Fatalf("the live holder after the reset: %v", err)
	}
	rows, err := db.Query("SELECT os_user, reason, token_before, token_after FROM fence_resets ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var who, why string
		var before, after int64
		if err := rows.Scan(&who, &why, &before, &after); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%s %q %d->%d", who, why, before, after))
	}
	me := osUser(t)
	if want := fmt.Sprintf(`[%s "a token typed while testing" 9223372036854775807->8 %s "one lower" 8->7]`, me, me); fmt.Sprint(got) != want {
		t.Fatalf("recorded %s, want %s", got, want)
	}
}

// Finding 5 of issue 43 in Redis: a mark was mended with redis-cli HSET,
// and nothing recorded it. 'fencelock fence reset --redis ADDR' lowers
// it, only, and appends who, why and what to fencelock:resets:{R} in the
// same script; the live holder writes again.
func TestFenceResetRedisProcess(t *testing.T) {
	fencelockBinary(t)
	addr := redistest.Addr(t)
	c := redisfence.NewClient(addr)
	defer c.Close()
	ctx := context.Background()
	f := redisfence.New(c)
	for _, k := range []string{f.MarkKey("ledger:alice"), f.ResetsKey("ledger:alice")} {
		if _, err := c.Do(ctx, "DEL", k); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.Write(ctx, "ledger:alice", math.MaxInt64); err != nil {
		t.Fatal(err)
	}
	reset := func(addr string, args ...string) (string, int) {
		return fenceReset(t, append([]string{"--redis", addr, "--resource", "ledger:alice"}, args...)...)
	}
	if out, code := reset(addr, "--to", "8", "--reason", "a token typed while testing"); code != 0 ||
		out != `reset "ledger:alice": mark 9223372036854775807 -> 8, last write 9223372036854775807 -> 8 (recorded in fencelock:resets:{ledger:alice})`+"\n" {
		t.Fatalf("reset: exit %d %q", code, out)
	}
	if out, code := reset("redis://"+addr+"/0", "--to", "9", "--reason", "x"); code != 1 || !strings.Contains(out, "--raise") {
		t.Fatalf("a raise without --raise: exit %d %q", code, out)
	}
	if out, code := reset("redis://"+addr, "--to", "7", "--reason", "one lower"); code != 0 || !strings.Contains(out, "mark 8 -> 7") {
		t.Fatalf("reset through a URL: exit %d %q", code, out)
	}
	if out, code := fenceReset(t, "--redis", addr, "--resource", "nope", "--to", "1", "--reason", "x"); code != 1 || !strings.Contains(out, "no mark") {
		t.Fatalf("no such mark: exit %d %q", code, out)
	}
	if out, code := reset(addr, "--to", "7", "--reason", "x", "--table", "t"); code != 2 {
		t.Fatalf("--table with --redis: exit %d %q", code, out)
	}
	if _, err := f.Write(ctx, "ledger:alice", 7); err != nil {
		t.Fatalf("the live holder after the reset: %v", err)
	}
	reply, err := c.Do(ctx, "XRANGE", f.ResetsKey("ledger:alice"), "-", "+")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range reply.([]any) {
		fields := e.([]any)[1].([]any)
		kv := map[string]string{}
		for i := 0; i+1 < len(fields); i += 2 {
			kv[fields[i].(string)] = fields[i+1].(string)
		}
		got = append(got, fmt.Sprintf("%s %q %s->%s", kv["os_user"], kv["reason"], kv["token_before"], kv["token_after"]))
	}
	me := osUser(t)
	if want := fmt.Sprintf(`[%s "a token typed while testing" 9223372036854775807->8 %s "one lower" 8->7]`, me, me); fmt.Sprint(got) != want {
		t.Fatalf("recorded %s, want %s", got, want)
	}
}
