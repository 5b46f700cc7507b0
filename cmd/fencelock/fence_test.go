package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/fencelock/fencelock/fence/filefence"
	"github.com/fencelock/fencelock/fence/sqlitefence"
)

// Finding 1 of issue 25: nothing showed or mended a mark that a made-up
// token had raised. 'fence marks' shows it, 'fence reset' lowers it while
// nothing else has the directory, and the real holder writes again.
func TestFenceMarksAndReset(t *testing.T) {
	dir := t.TempDir()
	ff, err := filefence.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for res, tok := range map[string]uint64{"/v/a": math.MaxUint64, "/v/b": 7, "with space": 3} {
		if err := ff.Admit(ctx, res, tok, nil); err != nil {
			t.Fatal(err)
		}
	}

	out, errs, code := runCLI(t, "", "fence", "marks", "--state", dir)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || errs != "" || len(lines) != 4 || !strings.HasPrefix(lines[0], "RESOURCE") ||
		strings.Join(strings.Fields(lines[1])[:4], " ") != "/v/a 18446744073709551615 18446744073709551615 -" ||
		!strings.HasPrefix(lines[3], `"with space"`) {
		t.Fatalf("marks (while the fence is open): exit %d stderr %q\n%s", code, errs, out)
	}
	out, _, code = runCLI(t, "", "fence", "marks", "--state", dir, "--json")
	var listed []map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &listed) != nil || len(listed) != 3 || listed[1]["token"] != 7.0 {
		t.Fatalf("marks --json: %d %s", code, out)
	}

	_, errs, code = runCLI(t, "", "fence", "reset", "--state", dir, "--resource", "/v/a", "--to", "6", "--reason", "x")
	if code != exitNo || !strings.Contains(errs, "refused: another process has") {
		t.Fatalf("reset while the fence is open: exit %d %q", code, errs)
	}
	ff.Close()
	for _, args := range [][]string{
		{"--state", dir, "--resource", "/v/a", "--reason", "x"},
		{"--state", dir, "--to", "6", "--reason", "x"},
		{"--resource", "/v/a", "--to", "6", "--reason", "x"},
		{"--state", dir, "--resource", "/v/a", "--to", "-1", "--reason", "x"},
		{"--state", dir, "--resource", "/v/a", "--to", "6"},
	} {
		if _, errs, code := runCLI(t, "", append([]string{"fence", "reset"}, args...)...); code != exitUsage {
			t.Fatalf("%q: exit %d %q", args, code, errs)
		}
	}
	if _, errs, code := runCLI(t, "", "fence", "reset", "--state", dir, "--resource", "/v/zzz", "--to", "6", "--reason", "x"); code != exitNo || !strings.Contains(errs, "no mark") {
		t.Fatalf("reset of an unknown resource: exit %d %q", code, errs)
	}
	out, errs, code = runCLI(t, "", "fence", "reset", "--state", dir, "--resource", "/v/a", "--to", "6", "--reason", "a test token")
	if code != 0 || out != `reset "/v/a": mark 18446744073709551615 -> 6, last write 18446744073709551615 -> 6`+"\n" {
		t.Fatalf("reset: exit %d %q %q", code, out, errs)
	}
	if log, _ := os.ReadFile(filepath.Join(dir, "resets.log")); !strings.Contains(string(log), strings.TrimSpace(out)) {
		t.Fatalf("resets.log: %q", log)
	}
	ff, err = filefence.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ff.Close()
	if err := ff.Admit(ctx, "/v/a", 10, nil); err != nil {
		t.Fatalf("the real holder after the reset: %v", err)
	}
	if ff.Highest("/v/b") != 7 {
		t.Fatal("the reset touched another mark")
	}
}

// The proxy process holds its --state: a reset is refused while it runs.
func TestFenceResetRefusedWhileTheProxyRuns(t *testing.T) {
	up := &recordingUpstream{}
	upstream := httptest.NewServer(up)
	defer upstream.Close()
	state := t.TempDir()
	cmd, addr := startProxyProcess(t, upstream.URL, state)
	if got := send(t, "PUT", addr+"/v/a", "999", "x"); got.status != 201 {
		t.Fatalf("%d %s", got.status, got.body)
	}
	out, errs, code := runCLI(t, "", "fence", "marks", "--state", state)
	if lines := strings.Split(out, "\n"); code != 0 || len(lines) < 2 || strings.Join(strings.Fields(lines[1])[:4], " ") != "/v/a 999 999 -" {
		t.Fatalf("marks while the proxy runs: %d %q %q", code, out, errs)
	}
	if _, errs, code := runCLI(t, "", "fence", "reset", "--state", state, "--resource", "/v/a", "--to", "5", "--reason", "x"); code != exitNo || !strings.Contains(errs, "stop the fence-proxy") {
		t.Fatalf("reset while the proxy runs: exit %d %q", code, errs)
	}
	cmd.Process.Kill()
	cmd.Wait()
	if _, errs, code := runCLI(t, "", "fence", "reset", "--state", state, "--resource", "/v/a", "--to", "5", "--reason", "a test token"); code != 0 {
		t.Fatalf("reset after the proxy stopped: exit %d %q", code, errs)
	}
	// The next proxy on the directory says so, once.
	for i, want := range []int{1, 0} {
		cmd, _, logs := startProxyProcessLogs(t, upstream.URL, state)
		if n := strings.Count(logs.String(), "a mark was reset since the last proxy ran"); n != want ||
			(want == 1 && !strings.Contains(logs.String(), `reason=\"a test token\" reset \"/v/a\": mark 999 -> 5`)) {
			t.Fatalf("proxy start %d logged:\n%s", i+1, logs.String())
		}
		cmd.Process.Kill()
		cmd.Wait()
	}
}

// Finding 5 of issue 43 (marks an operator mends): 'fence reset' raised a
// mark (5 -> 999, an operator-made poisoning of every holder below 999);
// resets.log had no actor, no reason and whole seconds. A reset lowers
// only unless --raise, which says what it poisons; each is recorded to
// the millisecond with the OS user and --reason.
func TestFenceResetLowersOnlyAndIsRecorded(t *testing.T) {
	dir := t.TempDir()
	ff, err := filefence.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := ff.Admit(context.Background(), "/v/a", 5, nil); err != nil {
		t.Fatal(err)
	}
	ff.Close()
	reset := func(args ...string) (string, string, int) {
		return runCLI(t, "", append([]string{"fence", "reset", "--state", dir, "--resource", "/v/a"}, args...)...)
	}
	if _, errs, code := reset("--to", "999", "--reason", "testing"); code != exitNo || !strings.Contains(errs, "--raise") || !strings.Contains(errs, "refused") {
		t.Fatalf("raising 5 to 999 without --raise: exit %d %q", code, errs)
	}
	if _, errs, code := reset("--to", "4"); code != exitUsage || !strings.Contains(errs, "--reason") {
		t.Fatalf("a reset without --reason: exit %d %q", code, errs)
	}
	out, errs, code := reset("--to", "999", "--raise", "--reason", "fence out every holder below 999")
	if code != 0 || !strings.Contains(out, "mark 5 -> 999") || !strings.Contains(out, "every write with a token below 999 is refused") {
		t.Fatalf("--raise: exit %d %q %q", code, out, errs)
	}
	out, errs, code = reset("--to", "4", "--reason", `mending "999"`)
	if code != 0 || out != `reset "/v/a": mark 999 -> 4, last write 5 -> 4`+"\n" {
		t.Fatalf("lowering: exit %d %q %q", code, out, errs)
	}
	log, _ := os.ReadFile(filepath.Join(dir, "resets.log"))
	lines := strings.Split(strings.TrimSpace(string(log)), "\n")
	user := osUser()
	line := regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z user=(\S+) reason=("[^"\\]*(?:\\.[^"\\]*)*") (.*)$`)
	if len(lines) != 2 {
		t.Fatalf("resets.log:\n%s", log)
	}
	for i, want := range []struct{ reason, what string }{
		{"fence out every holder below 999", `raise "/v/a": mark 5 -> 999`},
		{`mending "999"`, `reset "/v/a": mark 999 -> 4, last write 5 -> 4`},
	} {
		m := line.FindStringSubmatch(lines[i])
		if m == nil || m[1] != strconv.Quote(user)[1:len(strconv.Quote(user))-1] || m[2] != strconv.Quote(want.reason) || !strings.HasPrefix(m[3], want.what) {
			t.Fatalf("resets.log line %d: %q (user %q)", i+1, lines[i], user)
		}
	}
}

// Finding 5 of issue 43: the SQL fences were mended with plain SQL that
// nothing recorded. 'fence reset --sql' mends a SQLite fence (the
// PostgreSQL one is run in fence/fencetest, which has a server), lowering
// only, in a transaction that records it in a table of its own.
func TestFenceResetSQLite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	db, err := sqlitefence.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	f, err := sqlitefence.New(db, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.CreateTable(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := f.Admit(context.Background(), "acct", math.MaxInt64, nil); err != nil {
		t.Fatal(err)
	}
	reset := func(args ...string) (string, string, int) {
		return runCLI(t, "", append([]string{"fence", "reset", "--sql", "sqlite:" + path, "--resource", "acct"}, args...)...)
	}
	if _, errs, code := reset("--to", strconv.FormatUint(math.MaxInt64, 10)+"0", "--reason", "x"); code != exitUsage {
		t.Fatalf("a token SQLite cannot hold: exit %d %q", code, errs)
	}
	out, errs, code := reset("--to", "7", "--reason", "a test token")
	if code != 0 || out != `reset "acct": mark 9223372036854775807 -> 7, last write 9223372036854775807 -> 7 (recorded in fencelock_fence_resets)`+"\n" {
		t.Fatalf("reset: exit %d %q %q", code, out, errs)
	}
	if _, errs, code := reset("--to", "8", "--reason", "x"); code != exitNo || !strings.Contains(errs, "--raise") {
		t.Fatalf("raising: exit %d %q", code, errs)
	}
	if _, errs, code := runCLI(t, "", "fence", "reset", "--sql", "sqlite:"+path, "--resource", "nope", "--to", "1", "--reason", "x"); code != exitNo || !strings.Contains(errs, "no mark") {
		t.Fatalf("no such mark: exit %d %q", code, errs)
	}
	if err := f.Admit(context.Background(), "acct", 7, nil); err != nil {
		t.Fatalf("the real holder after the reset: %v", err)
	}
	var n int
	var who, why string
	var before, after int64
	if err := db.QueryRow("SELECT count(*), os_user, reason, token_before, token_after FROM fencelock_fence_resets").Scan(&n, &who, &why, &before, &after); err != nil ||
		n != 1 || who != osUser() || why != "a test token" || before != math.MaxInt64 || after != 7 {
		t.Fatalf("recorded: %d %q %q %d %d %v", n, who, why, before, after, err)
	}
	for _, args := range [][]string{
		{"--sql", "oracle://x", "--resource", "acct", "--to", "1", "--reason", "x"},
		{"--sql", "mysql://x", "--resource", "acct", "--to", "1", "--reason", "x"},
		{"--sql", "sqlite:" + path, "--state", t.TempDir(), "--resource", "acct", "--to", "1", "--reason", "x"},
		{"--sql", "sqlite:" + path, "--redis", "127.0.0.1:1", "--resource", "acct", "--to", "1", "--reason", "x"},
		{"--redis", "127.0.0.1:1", "--table", "t", "--resource", "acct", "--to", "1", "--reason", "x"},
		{"--redis", "rediss://127.0.0.1:1", "--resource", "acct", "--to", "1", "--reason", "x"},
		{"--redis", "redis://127.0.0.1:1/x", "--resource", "acct", "--to", "1", "--reason", "x"},
		{"--redis", "127.0.0.1:1", "--resource", "acct", "--to", "9223372036854775808", "--reason", "x"},
	} {
		if _, errs, code := runCLI(t, "", append([]string{"fence", "reset"}, args...)...); code != exitUsage {
			t.Fatalf("%q: exit %d %q", args, code, errs)
		}
	}
}

// Finding 5 of issue 43: the proxy said nothing at start about a reset
// made while it was stopped. It logs, at WARN, each reset since it last
// ran, once.
func TestFenceProxyLogsResetsSinceItLastRan(t *testing.T) {
	dir := t.TempDir()
	log := func() string {
		var b strings.Builder
		if err := logResetsSince(dir, slog.New(slog.NewTextHandler(&b, nil))); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	if got := log(); got != "" {
		t.Fatalf("no resets: %q", got)
	}
	for _, l := range []string{"first", "second"} {
		if err := appendResetLog(dir, l); err != nil {
			t.Fatal(err)
		}
	}
	got := log()
	if strings.Count(got, "level=WARN") != 2 || !strings.Contains(got, "reset=first") || !strings.Contains(got, "reset=second") {
		t.Fatalf("two resets: %q", got)
	}
	if got := log(); got != "" {
		t.Fatalf("logged again at the next start: %q", got)
	}
	appendResetLog(dir, "third")
	if got := log(); strings.Count(got, "level=WARN") != 1 || !strings.Contains(got, "reset=third") {
		t.Fatalf("one more: %q", got)
	}
}

// --sql mysql:// takes the Go driver's DSN, or host:port in it; --redis
// takes host:port or a redis:// URL, its password or REDISCLI_AUTH's.
func TestFenceResetStoreAddresses(t *testing.T) {
	for in, want := range map[string]string{
		"mysql://app:pw@tcp(db.example:3306)/shop":            "app pw tcp db.example:3306 shop",
		"mysql://app:pw@db.example:3306/shop":                 "app pw tcp db.example:3306 shop",
		"mysql://app:p@ss/w0rd@db.example:3306/shop?tls=true": "app p@ss/w0rd tcp db.example:3306 shop",
		"mysql://app@unix(/run/mysqld/mysqld.sock)/shop":      "app  unix /run/mysqld/mysqld.sock shop",
		"mysql://app@db.example/":                             "app  tcp db.example:3306 ",
	} {
		cfg, err := mysqlDSN(in)
		if err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		if got := strings.Join([]string{cfg.User, cfg.Passwd, cfg.Net, cfg.Addr, cfg.DBName}, " "); got != want {
			t.Fatalf("%s: %q, want %q", in, got, want)
		}
	}
	if _, err := mysqlDSN("mysql://nodb"); err == nil {
		t.Fatal("a DSN without /")
	}
	for _, c := range []struct{ addr, auth, want string }{
		{"127.0.0.1:6380", "", "127.0.0.1:6380   0"},
		{"127.0.0.1:6380", "env-secret", "127.0.0.1:6380  env-secret 0"},
		{"redis://127.0.0.1:6380/2", "", "127.0.0.1:6380   2"},
		{"redis://:url-secret@127.0.0.1:6380", "env-secret", "127.0.0.1:6380  url-secret 0"},
		{"redis://ops:url-secret@127.0.0.1:6380", "", "127.0.0.1:6380 ops url-secret 0"},
		{"redis://ops@127.0.0.1", "env-secret", "127.0.0.1:6379 ops env-secret 0"},
	} {
		r, err := parseRedis(c.addr, c.auth)
		if got := fmt.Sprintf("%s %s %s %d", r.addr, r.user, r.password, r.db); err != nil || got != c.want {
			t.Fatalf("%s: %q %v, want %q", c.addr, got, err, c.want)
		}
	}
	for _, bad := range []string{"rediss://127.0.0.1:6380", "redis://127.0.0.1:6380/x", "redis://", "http://h:1", ""} {
		if _, err := parseRedis(bad, ""); err == nil {
			t.Fatalf("%q: no error", bad)
		}
	}
}

// TestFenceStateThatIsNoFence (issue 44): a --state that is missing, a
// file, or a directory holding no fence is bad input, said in one line
// that names the path and what is wrong with it (exit 2), and reset
// leaves nothing behind in it. Before, marks and reset printed a bare
// "stat DIR: no such file or directory" (exit 1), marks listed an empty
// directory as a fence without marks, and reset made a fence in it.
func TestFenceStateThatIsNoFence(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "nope")
	file := filepath.Join(dir, "a-file")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ state, want string }{
		{missing, "--state " + missing + ": no such directory"},
		{file, "--state " + file + " is a file, not a fence's directory"},
		{empty, "--state " + empty + " holds no fence (no marks, no marks.log)"},
	} {
		for _, args := range [][]string{
			{"fence", "marks", "--state", tc.state},
			{"fence", "reset", "--state", tc.state, "--resource", "r", "--to", "1", "--reason", "mend"},
		} {
			out, errs, code := runCLI(t, "", args...)
			if code != exitUsage || !strings.Contains(errs, tc.want) || !strings.Contains(errs, "fence-proxy") || out != "" {
				t.Errorf("%q: exit %d, stdout %q, stderr %q; want 2 and %q with what to give", args, code, out, errs, tc.want)
			}
		}
	}
	if left, err := os.ReadDir(empty); err != nil || len(left) != 0 {
		t.Errorf("the empty directory after the refusals: %v %v; want it left empty", left, err)
	}
}
