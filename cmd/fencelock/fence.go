package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/fencelock/fencelock/fence/filefence"
)

// The fence command: an operator's view of a file fence's marks (the
// directory of fence-proxy --state, or of filefence.Open), and the one
// way to mend a mark.

const fenceUsage = `Usage: fencelock fence marks --state DIR [--json]
       fencelock fence reset --state DIR --resource R --to N

marks lists the marks of a file fence (fence-proxy's --state DIR, or a
directory fence/filefence keeps): per resource, the highest token
honoured, the last write's token, the lock key it is bound to and when it
last rose. It reads without taking the directory, so it works while the
proxy runs.

reset sets one resource's mark to N, for a mark a made-up token raised
(say 18446744073709551615 sent while testing); N 0 forgets the resource,
its bound key included. It is refused while the proxy (or any process)
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

const fenceResetUsage = `Usage: fencelock fence reset --state DIR --resource R --to N

Sets the mark of resource R, and only R, to exactly N, lowering it if need
be, and keeps the lock key R is bound to; N 0 forgets R altogether. Every
token from N up is honoured again: use it to mend a mark that a made-up or
mistyped token raised, after finding, with 'fencelock fence marks' and the
cluster's last token, the value the real holders need. What changed is
printed and appended to DIR/resets.log. Refused (exit 1) while another
process has DIR: stop the proxy first. R must have a mark.
`

const fenceExit = `Exit status: 0 done; 1 refused (DIR in use, no such mark); 2 bad usage,
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
	state := f.String("state", "", "the fence's `DIR` (fence-proxy --state); required")
	resource := f.String("resource", "", "the `RESOURCE` whose mark to set, exactly as 'fence marks' shows it; required")
	to := f.String("to", "", "the token `N` the mark becomes (0: forget the resource); required")
	pos, err := f.parse(args)
	if err != nil {
		return err
	}
	if err := noArgs(pos); err != nil {
		return err
	}
	if *state == "" || !f.given("resource") || *to == "" {
		return usageError("--state, --resource and --to are all required: a reset names the one mark it changes")
	}
	n, err := strconv.ParseUint(*to, 10, 64)
	if err != nil {
		return usageError("--to %q: want a token, 0 or more", *to)
	}
	if err := checkFenceDir(*state); err != nil {
		return err
	}
	ff, err := filefence.Open(*state)
	if errors.Is(err, filefence.ErrLocked) {
		return answerNo("refused: another process has %s (stop the fence-proxy on it first): %v", *state, err)
	}
	if err != nil {
		return err
	}
	defer ff.Close()
	known := false
	for _, m := range ff.Marks() {
		known = known || m.Resource == *resource
	}
	if !known {
		return answerNo("refused: %s has no mark for %s ('fencelock fence marks --state %s' lists them)", *state, strconv.Quote(*resource), *state)
	}
	before, err := ff.Reset(ctx, *resource, n)
	if err != nil {
		return err
	}
	what := fmt.Sprintf("reset %s: mark %d -> %d, last write %d -> %d", strconv.Quote(*resource), before.Highest, n, before.LastWrite, min(n, before.LastWrite))
	if n == 0 {
		what = fmt.Sprintf("reset %s: mark %d -> forgotten, with its binding", strconv.Quote(*resource), before.Highest)
	}
	if before.Key != "" {
		what += fmt.Sprintf(" (bound to lock key %s)", strconv.Quote(before.Key))
	}
	if err := appendResetLog(*state, time.Now().UTC().Format(time.RFC3339)+" "+what); err != nil {
		return fmt.Errorf("the mark is reset, but %s could not record it: %w", filepath.Join(*state, "resets.log"), err)
	}
	fmt.Fprintln(e.stdout, what)
	return nil
}

func appendResetLog(dir, line string) error {
	f, err := os.OpenFile(filepath.Join(dir, "resets.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
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
