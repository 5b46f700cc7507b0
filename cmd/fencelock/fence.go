package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fencelock/fencelock/fence"
	"github.com/fencelock/fencelock/fence/filefence"
)

// The fence command: an operator's view of a file fence's marks (the
// directory of fence-proxy --state, or of filefence.Open), and the one
// way to mend a mark.

const fenceUsage = `Usage: fencelock fence marks --state DIR [--json]
       fencelock fence reset --state DIR --resource R --to N --reason TEXT [--raise]
       fencelock fence reset --sql DSN [--table T] --resource R --to N --reason TEXT [--raise]
       fencelock fence reset --redis ADDR --resource R --to N --reason TEXT [--raise]

marks lists the marks of a file fence (fence-proxy's --state DIR, or a
directory fence/filefence keeps): per resource, the highest token
honoured, the last write's token, the lock key it is bound to and when it
last rose. It reads without taking the directory, so it works while the
proxy runs.

reset lowers one resource's mark to N, for a mark a made-up token raised
(say 18446744073709551615 sent while testing); N 0 forgets the resource,
its bound key included. Raising a mark needs --raise. Each reset is
recorded with the time, the OS user and --reason: in DIR/resets.log for a
file fence (the next fence-proxy on DIR logs it at start), in a table of
its own for a SQL fence (--sql), in a stream beside the mark for a Redis
fence (--redis). A file fence is refused while the proxy (or any process)
has the directory. See docs/OPERATIONS.md, "Mending a fence's marks".

Run 'fencelock fence SUBCOMMAND -h' for its flags.
`

const fenceMarksUsage = `Usage: fencelock fence marks --state DIR [--json]

Lists the marks of the file fence in DIR, by resource: TOKEN is the
highest token honoured (a write below it is refused), LAST-WRITE the last
write's (a read below it is refused), KEY the lock key the resource is
bound to (- for none: a fence that does not verify), RAISED when the mark
last rose. Reads without taking DIR: the proxy may be running.
`

const fenceResetUsage = `Usage: fencelock fence reset --state DIR --resource R --to N --reason TEXT [--raise]
       fencelock fence reset --sql DSN [--table T] --resource R --to N --reason TEXT [--raise]
       fencelock fence reset --redis ADDR --resource R --to N --reason TEXT [--raise]

Lowers the mark of resource R, and only R, to N (the last write's too,
when it was above), and keeps the lock key R is bound to; N 0 forgets R
altogether. Every token from N up is honoured again: use it to mend a
mark that a made-up or mistyped token raised, after finding, with
'fencelock fence marks' and the cluster's last token, the value the real
holders need. R must have a mark.

An N above the mark is refused (exit 1): it would refuse every write
below N, the current holder's included, a poisoning rather than a mend.
--raise does it, and says so.

What changed is printed and recorded with the time (to the millisecond),
the OS user and --reason: appended to DIR/resets.log for a file fence
(--state; refused while another process has DIR: stop the proxy first);
for a SQL fence (--sql), written to the table T_resets in the same
transaction as the reset (the fences' CreateTable makes it); for a Redis
fence (--redis), appended to the stream fencelock:resets:{R} in the same
script (XRANGE lists it).

DSN is sqlite:PATH, a postgres:// (postgresql://) URL, or mysql:// followed
by the DSN of the Go MySQL driver (user:password@tcp(host:3306)/db, or
user:password@host:3306/db) for MySQL and MariaDB. T is the fence table
(default fencelock_fence for SQLite, fence for PostgreSQL and MySQL).

ADDR is host:port, or redis://[user[:password]@]host[:port][/db]; without
a password there, REDISCLI_AUTH's is used, as redis-cli does. The mark is
the hash fencelock:mark:{R} (redisfence's default key names).
`

const fenceExit = `Exit status: 0 done; 1 refused (DIR in use, no such mark, a raise without --raise); 2 bad usage,
or a DIR that is no fence (missing, a file, or holding no marks file).
`

var fenceSubcommands = []string{"marks", "reset"}

func runFence(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "-help" || args[0] == "--help" {
		fmt.Fprint(e.stdout, fenceUsage)
		if len(args) == 0 {
			return &exitError{Code: exitUsage}
		}
		return errHelp
	}
	sub, args := args[0], args[1:]
	if !slices.Contains(fenceSubcommands, sub) {
		msg := fmt.Sprintf("unknown subcommand %q: marks or reset", sub)
		if s := suggest(sub, fenceSubcommands); s != "" {
			msg = fmt.Sprintf("unknown subcommand %q; did you mean %q?", sub, s)
		}
		return usageError("%s", msg)
	}
	if sub == "marks" {
		return named("fence marks", runFenceMarks(e, args))
	}
	return named("fence reset", runFenceReset(ctx, e, args))
}

func runFenceMarks(e *env, args []string) error {
	f := newFlags(e, "fence marks", fenceMarksUsage)
	f.after = fenceExit
	state := f.String("state", "", "the fence's `DIR` (fence-proxy --state); required")
	asJSON := f.Bool("json", false, "print the marks as JSON, one list")
	pos, err := f.parse(args)
	if err != nil {
		return err
	}
	if err := noArgs(pos); err != nil {
		return err
	}
	if *state == "" {
		return usageError("--state is required")
	}
	if err := checkFenceDir(*state); err != nil {
		return err
	}
	marks, err := filefence.ReadMarks(*state)
	if err != nil {
		return err
	}
	if *asJSON {
		type jsonMark struct {
			Resource  string `json:"resource"`
			Token     uint64 `json:"token"`
			LastWrite uint64 `json:"last_write"`
			Key       string `json:"key,omitempty"`
			Raised    string `json:"raised,omitempty"`
		}
		out := make([]jsonMark, 0, len(marks))
		for _, m := range marks {
			out = append(out, jsonMark{m.Resource, m.Highest, m.LastWrite, m.Key, raisedText(m.Raised, "")})
		}
		return writeJSON(e.stdout, out)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RESOURCE\tTOKEN\tLAST-WRITE\tKEY\tRAISED")
	for _, m := range marks {
		key := m.Key
		if key == "" {
			key = "-"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\n", quoteIfNeeded(m.Resource), m.Highest, m.LastWrite, quoteIfNeeded(key), raisedText(m.Raised, "-"))
	}
	return tw.Flush()
}

// fenceStateHint is what --state should be, under every refusal of one.
const fenceStateHint = "Give the directory fence-proxy was given as --state (or a filefence directory)."

// checkFenceDir refuses a --state that is not a file fence's directory,
// naming the path and what is wrong with it, before anything reads or
// writes there: a missing path, a file, or a directory holding neither
// of the files every fence has from its first open (a typo that names
// some other directory, where reset would otherwise make a fence).
func checkFenceDir(dir string) error {
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return (&usageErr{message: fmt.Sprintf("--state %s: no such directory", dir), hint: fenceStateHint}).exit()
	case err != nil:
		return answerNo("--state %s: %v", dir, errors.Unwrap(err))
	case !fi.IsDir():
		return (&usageErr{message: fmt.Sprintf("--state %s is a file, not a fence's directory", dir), hint: fenceStateHint}).exit()
	}
	for _, name := range []string{filefence.FileName, filefence.LogName} {
		if _, err := os.Lstat(filepath.Join(dir, name)); err == nil || !errors.Is(err, fs.ErrNotExist) {
			return nil
		}
	}
	return (&usageErr{message: fmt.Sprintf("--state %s holds no fence (no %s, no %s)", dir, filefence.FileName, filefence.LogName), hint: fenceStateHint}).exit()
}

func raisedText(t time.Time, none string) string {
	if t.IsZero() {
		return none
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// quoteIfNeeded shows a name with spaces or odd characters Go-quoted, so
// that a table row is still one row.
func quoteIfNeeded(s string) string {
	if q := strconv.Quote(s); q[1:len(q)-1] != s || s == "" || slices.ContainsFunc([]rune(s), func(r rune) bool { return r == ' ' || r == '\t' }) {
		return q
	}
	return s
}

func runFenceReset(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "fence reset", fenceResetUsage)
	f.after = fenceExit
	state := f.String("state", "", "the file fence's `DIR` (fence-proxy --state); this, --sql or --redis")
	dsn := f.String("sql", "", "the SQL fence's database, `DSN` sqlite:PATH, postgres://... or mysql://...; this, --state or --redis")
	table := f.String("table", "", "the SQL fence's `TABLE` (default fencelock_fence for SQLite, fence for PostgreSQL and MySQL)")
	redisAddr := f.String("redis", "", "the Redis fence's server, `ADDR` host:port or redis://...; this, --state or --sql")
	resource := f.String("resource", "", "the `RESOURCE` whose mark to set, exactly as 'fence marks' shows it; required")
	to := f.String("to", "", "the token `N` the mark becomes (0: forget the resource); required")
	reason := f.String("reason", "", "why, in a few words (`TEXT`), recorded with the reset; required")
	raise := f.Bool("raise", false, "allow --to above the mark (every write below it is then refused, the current holder's included)")
	pos, err := f.parse(args)
	if err != nil {
		return err
	}
	if err := noArgs(pos); err != nil {
		return err
	}
	if given := btoi(*state != "") + btoi(*dsn != "") + btoi(*redisAddr != ""); given != 1 {
		return usageError("give one of --state DIR (a file fence), --sql DSN (a SQL fence) and --redis ADDR (a Redis fence)")
	}
	if !f.given("resource") || *to == "" {
		return usageError("--resource and --to are both required: a reset names the one mark it changes")
	}
	if strings.TrimSpace(*reason) == "" {
		return usageError("--reason is required: a reset is recorded with who made it and why")
	}
	if *dsn == "" && *table != "" {
		return usageError("--table is for --sql")
	}
	n, err := strconv.ParseUint(*to, 10, 64)
	if err != nil {
		return usageError("--to %q: want a token, 0 or more", *to)
	}
	req := fence.ResetRequest{Resource: *resource, To: n, Raise: *raise, User: osUser(), Reason: *reason}
	switch {
	case *dsn != "":
		return resetSQL(ctx, e, *dsn, *table, req)
	case *redisAddr != "":
		return resetRedis(ctx, e, *redisAddr, req)
	}
	return resetFile(ctx, e, *state, req)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// resetText says what a reset changed.
func resetText(r fence.ResetRequest, highest, lastWrite uint64, key string) string {
	verb := "reset"
	if r.To > highest {
		verb = "raise"
	}
	what := fmt.Sprintf("%s %s: mark %d -> %d, last write %d -> %d", verb, strconv.Quote(r.Resource), highest, r.To, lastWrite, min(r.To, lastWrite))
	if r.To == 0 {
		what = fmt.Sprintf("reset %s: mark %d -> forgotten, with its binding", strconv.Quote(r.Resource), highest)
	}
	if key != "" {
		what += fmt.Sprintf(" (bound to lock key %s)", strconv.Quote(key))
	}
	if r.To > highest {
		what += fmt.Sprintf(": every write with a token below %d is refused from now on, the current holder's included", r.To)
	}
	return what
}

// refusedReset is the answer to a reset the fence refused; list says
// how to list the fence's marks.
func refusedReset(err error, list string) error {
	switch {
	case errors.Is(err, fence.ErrResetRaises):
		return answerNo("refused: %v; give --raise if that is what you want", err)
	case errors.Is(err, fence.ErrNoMark):
		return answerNo("refused: %v (%s lists them)", err, list)
	}
	return err
}

func resetFile(ctx context.Context, e *env, state string, req fence.ResetRequest) error {
	if err := checkFenceDir(state); err != nil {
		return err
	}
	ff, err := filefence.Open(state)
	if errors.Is(err, filefence.ErrLocked) {
		return answerNo("refused: another process has %s (stop the fence-proxy on it first): %v", state, err)
	}
	if err != nil {
		return err
	}
	defer ff.Close()
	var before filefence.Mark
	known := false
	for _, m := range ff.Marks() {
		if m.Resource == req.Resource {
			before, known = m, true
		}
	}
	if !known {
		return refusedReset(fmt.Errorf("%w %s in %s", fence.ErrNoMark, strconv.Quote(req.Resource), state), "'fencelock fence marks'")
	}
	if err := req.Check(before.Highest); err != nil {
		return refusedReset(err, "'fencelock fence marks'")
	}
	if _, err := ff.Reset(ctx, req.Resource, req.To); err != nil {
		return err
	}
	what := resetText(req, before.Highest, before.LastWrite, before.Key)
	line := fmt.Sprintf("%s user=%s reason=%s %s", time.Now().UTC().Format("2006-01-02T15:04:05.000Z07:00"), quoteIfNeeded(req.User), strconv.Quote(req.Reason), what)
	if err := appendResetLog(state, line); err != nil {
		return fmt.Errorf("the mark is reset, but %s could not record it: %w", filepath.Join(state, resetsLog), err)
	}
	fmt.Fprintln(e.stdout, what)
	return nil
}

// resetsLog, in a file fence's directory, records each reset; resetsSeen
// is how much of it a fence-proxy on the directory has logged.
const (
	resetsLog  = "resets.log"
	resetsSeen = "proxy-resets-seen"
)

func appendResetLog(dir, line string) error {
	f, err := os.OpenFile(filepath.Join(dir, resetsLog), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintln(f, line); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// logResetsSince logs, at WARN, each line of dir's resets.log that a
// proxy has not logged yet, and records that it has.
func logResetsSince(dir string, log *slog.Logger) error {
	data, err := os.ReadFile(filepath.Join(dir, resetsLog))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	seen := 0
	if b, err := os.ReadFile(filepath.Join(dir, resetsSeen)); err == nil {
		seen, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	if seen < 0 || seen > len(data) {
		seen = 0 // the log was replaced: all of it is news
	}
	fresh := strings.TrimSuffix(string(data[seen:]), "\n")
	if fresh == "" {
		return nil
	}
	for _, line := range strings.Split(fresh, "\n") {
		log.Warn("fence-proxy: a mark was reset since the last proxy ran on "+dir, "reset", line)
	}
	tmp := filepath.Join(dir, resetsSeen+".tmp")
	if err := os.WriteFile(tmp, []byte(strconv.Itoa(len(data))+"\n"), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, resetsSeen))
}

// osUser names who runs this, for the record of a reset.
func osUser() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	return "uid " + strconv.Itoa(os.Getuid())
}
