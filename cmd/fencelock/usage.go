package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// The one usage path. Every command builds its flags with newFlags, parses
// them with flags.parse and reports bad usage with usageError, so that all
// of them:
//
//   - take --flag and -flag, before or after their arguments;
//   - print help (-h, --help, 'fencelock help CMD') on stdout and exit 0;
//   - report a usage error as one line plus a hint on stderr, exit 2;
//   - show each flag once, as --flag, with its default and variable;
//   - read a duration only with its unit (see durationValue).

// usageErr is bad usage: main prints "fencelock: CMD: message" and the
// hint on the next line, and exits 2. An empty cmd is filled in by the
// dispatcher; an empty hint points at the command's help.
type usageErr struct {
	cmd     string
	message string
	hint    string
}

func (e *usageErr) Error() string {
	if e.cmd == "" || strings.HasPrefix(e.message, e.cmd+":") || strings.HasPrefix(e.message, e.cmd+" ") {
		return e.message
	}
	return e.cmd + ": " + e.message
}

// exit wraps e in the exit status of bad usage, so that it is an
// *exitError like every other status.
func (e *usageErr) exit() error { return &exitError{Code: exitUsage, Err: e} }

// Hint is the line printed under the message.
func (e *usageErr) Hint() string {
	if e.hint != "" {
		return e.hint
	}
	if e.cmd == "" {
		return "Run 'fencelock help' for the list of commands."
	}
	return fmt.Sprintf("Run 'fencelock %s -h' for usage.", e.cmd)
}

// usageError is bad usage (exit 2), the message in the command's terms.
func usageError(format string, args ...any) error {
	return (&usageErr{message: fmt.Sprintf(format, args...)}).exit()
}

// named gives the usage errors of err that name no command the name
// cmd, for a subcommand ("lab replay", "cluster join").
func named(cmd string, err error) error {
	var ue *usageErr
	if errors.As(err, &ue) && ue.cmd == "" {
		ue.cmd = cmd
	}
	return err
}

// errHelp means -h was asked for and the usage has been printed: the
// dispatcher turns it into exit 0.
var errHelp = errors.New("help")

// flags is one command's flag set.
type flags struct {
	fs        *flag.FlagSet
	e         *env
	cmd       string // as typed after fencelock: "acquire", "cluster join"
	usage     string // the command's text, printed before its flags
	after     string // printed after the flags (exit statuses, notes)
	order     []string
	env       map[string]string // flag name → environment variable
	onCmdLine map[string]bool   // the flags given on the command line
	// stopAtArg ends flag parsing at the first argument, so that
	// everything after it is an argument (lock without "--").
	stopAtArg bool
}

func newFlags(e *env, cmd, usage string) *flags {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f := &flags{fs: fs, e: e, cmd: cmd, usage: usage, env: map[string]string{}}
	fs.Usage = func() {}
	return f
}

func (f *flags) add(name string) { f.order = append(f.order, name) }

func (f *flags) String(name, def, usage string) *string {
	f.add(name)
	return f.fs.String(name, def, usage)
}

func (f *flags) Bool(name string, def bool, usage string) *bool {
	f.add(name)
	return f.fs.Bool(name, def, usage)
}

func (f *flags) Int(name string, def int, usage string) *int {
	f.add(name)
	return f.fs.Int(name, def, usage)
}

func (f *flags) IntVar(p *int, name string, def int, usage string) {
	f.add(name)
	f.fs.IntVar(p, name, def, usage)
}

func (f *flags) Int64(name string, def int64, usage string) *int64 {
	f.add(name)
	return f.fs.Int64(name, def, usage)
}

func (f *flags) Uint64(name string, def uint64, usage string) *uint64 {
	f.add(name)
	return f.fs.Uint64(name, def, usage)
}

// Duration is a duration flag that refuses a bare number (durationValue).
func (f *flags) Duration(name string, def time.Duration, usage string) *time.Duration {
	d := def
	f.Var((*durationValue)(&d), name, usage)
	return &d
}

func (f *flags) Var(v flag.Value, name, usage string) {
	f.add(name)
	f.fs.Var(v, name, usage)
}

// Env makes the flag name take its value from the variable envVar when it
// is not given on the command line (a flag beats its variable).
func (f *flags) Env(name, envVar string) {
	f.env[name] = envVar
}

// given says whether name was set on the command line (not by its
// variable).
func (f *flags) given(name string) bool { return f.onCmdLine[name] }

// parse parses args, accepting flags before and after the arguments (Go's
// flag package stops at the first one) unless stopAtArg; everything after
// "--" is an argument as it stands. It returns the arguments. On -h it
// prints the usage on stdout and returns errHelp.
func (f *flags) parse(args []string) ([]string, error) {
	if f.e.probe != nil {
		f.e.probe(f)
		return nil, errHelp
	}
	var fl, pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if len(a) < 2 || a[0] != '-' {
			if f.stopAtArg {
				pos = append(pos, args[i:]...)
				break
			}
			pos = append(pos, a)
			continue
		}
		fl = append(fl, a)
		name := strings.TrimLeft(a, "-")
		if strings.Contains(name, "=") {
			continue
		}
		if x := f.fs.Lookup(name); x != nil && !isBoolFlag(x) && i+1 < len(args) {
			fl = append(fl, args[i+1])
			i++
		}
	}
	if err := f.fs.Parse(fl); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			f.printUsage(f.e.stdout)
			return nil, errHelp
		}
		return nil, f.flagError(err)
	}
	f.onCmdLine = map[string]bool{}
	f.fs.Visit(func(fl *flag.Flag) { f.onCmdLine[fl.Name] = true })
	for _, name := range f.order {
		v, ok := f.env[name]
		if !ok || f.given(name) {
			continue
		}
		if s := strings.TrimSpace(f.e.getenv(v)); s != "" {
			if err := f.fs.Set(name, s); err != nil {
				return nil, (&usageErr{cmd: f.cmd, message: fmt.Sprintf("%s %q is not a valid --%s: %v", v, s, name, err)}).exit()
			}
		}
	}
	return pos, nil
}

// flagError rewrites the flag package's error in --flag form, with a
// suggestion when an unknown flag is close to a known one.
func (f *flags) flagError(err error) error {
	msg := err.Error()
	for _, from := range []string{"flag -", "for -", ": -"} {
		msg = strings.ReplaceAll(msg, from, strings.TrimSuffix(from, "-")+"--")
	}
	msg = strings.ReplaceAll(msg, "for flag --", "for --")
	ue := &usageErr{cmd: f.cmd, message: msg}
	if name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: "); ok {
		if s := suggestFlags(strings.TrimLeft(name, "-"), f.order); s != "" {
			ue.hint = fmt.Sprintf("Did you mean %s? Run 'fencelock %s -h' for usage.", s, f.cmd)
		}
	}
	return ue.exit()
}

func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// printUsage writes the command's help: its text, each flag once in
// --flag form with its default and variable, and what comes after.
func (f *flags) printUsage(w io.Writer) {
	fmt.Fprint(w, strings.TrimRight(f.usage, "\n")+"\n")
	if len(f.order) > 0 {
		fmt.Fprintln(w, "\nFlags:")
		durations := false
		for _, name := range f.order {
			fl := f.fs.Lookup(name)
			if _, ok := fl.Value.(*durationValue); ok {
				durations = true
			}
			if _, ok := fl.Value.(*durationList); ok {
				durations = true
			}
			fmt.Fprint(w, f.flagLine(fl))
		}
		if durations {
			fmt.Fprintln(w, "\n"+durationNote)
		}
	}
	if f.after != "" {
		fmt.Fprint(w, "\n"+strings.TrimRight(f.after, "\n")+"\n")
	}
}

// durationNote is the rule for durations, printed under every flag list
// that has one: a bare number is refused everywhere, because the API
// counts milliseconds (ttl_ms) and "--ttl 30000" must not quietly mean
// eight hours.
const durationNote = "Durations need a unit: 250ms, 30s, 5m, 1h30m (a bare number other than 0 is refused)."

const flagIndent = 22

func (f *flags) flagLine(fl *flag.Flag) string {
	arg, usage := flag.UnquoteUsage(fl)
	if _, ok := fl.Value.(*durationValue); ok && arg == "value" {
		arg = "D"
	}
	if _, ok := fl.Value.(*durationList); ok && arg == "value" {
		arg = "LIST"
	}
	switch {
	case isBoolFlag(fl):
		arg = ""
	case arg == "int" || arg == "uint":
		arg = "N"
	case arg == "string" || arg == "value" || arg == "float":
		arg = "VALUE"
	}
	head := "  --" + fl.Name
	if arg != "" {
		head += " " + arg
	}
	var notes []string
	if !isZeroDefault(fl) {
		notes = append(notes, "default "+fl.DefValue)
	}
	if v, ok := f.env[fl.Name]; ok {
		notes = append(notes, "env "+v)
	}
	if len(notes) > 0 {
		usage += " (" + strings.Join(notes, "; ") + ")"
	}
	var b strings.Builder
	b.WriteString(head)
	col := len(head)
	if col+2 > flagIndent {
		b.WriteString("\n")
		col = 0
	}
	b.WriteString(strings.Repeat(" ", flagIndent-col))
	b.WriteString(wrap(usage, flagIndent, 80))
	b.WriteString("\n")
	return b.String()
}

func isZeroDefault(fl *flag.Flag) bool {
	switch fl.DefValue {
	case "", "0", "false", "0s":
		return true
	}
	return false
}

// wrap folds s into lines of at most width columns, the lines after the
// first indented by indent.
func wrap(s string, indent, width int) string {
	var b strings.Builder
	col := indent
	for i, word := range strings.Fields(s) {
		if i > 0 {
			if col+1+len(word) > width {
				b.WriteString("\n" + strings.Repeat(" ", indent))
				col = indent
			} else {
				b.WriteString(" ")
				col++
			}
		}
		b.WriteString(word)
		col += len(word)
	}
	return b.String()
}

// wantArgs checks the number of arguments.
func wantArgs(pos []string, min, max int, what string) error {
	if len(pos) < min || len(pos) > max {
		return usageError("want %s, got %d argument(s)", what, len(pos))
	}
	return nil
}

// noArgs refuses any argument, for commands that take flags only.
func noArgs(pos []string) error {
	if len(pos) > 0 {
		return usageError("unexpected argument %q", pos[0])
	}
	return nil
}

// durationValue is every duration flag's value. A bare number is refused
// rather than read as seconds or milliseconds: the API speaks
// milliseconds, people speak seconds, and a lease that silently lasts a
// thousand times longer (or shorter) than meant is a correctness bug.
// Zero needs no unit.
type durationValue time.Duration

func (d *durationValue) Set(s string) error {
	v, err := parseDuration(s)
	if err != nil {
		return err
	}
	*d = durationValue(v)
	return nil
}

func (d *durationValue) String() string { return time.Duration(*d).String() }

func parseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if _, err := strconv.ParseFloat(s, 64); err == nil && s != "0" {
		return 0, fmt.Errorf("a duration needs a unit (%ss or %sms, say)", s, s)
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, errors.New("not a duration like 250ms, 30s or 1m30s")
	}
	return d, nil
}

// durationList is a comma-separated list of durations under the same rule.
type durationList struct {
	dst   *[]time.Duration
	parse func(string) ([]time.Duration, error)
	str   func() string
}

func (l *durationList) Set(s string) error {
	for _, item := range strings.Split(s, ",") {
		if _, err := parseDuration(item); err != nil {
			return fmt.Errorf("%q: %v", strings.TrimSpace(item), err)
		}
	}
	v, err := l.parse(s)
	if err != nil {
		return err
	}
	*l.dst = v
	return nil
}

func (l *durationList) String() string {
	if l == nil || l.str == nil {
		return ""
	}
	return l.str()
}

// suggestFlags names the flags an unknown flag s may have meant: for a
// name of one or two letters (-t, as short options are spelled elsewhere)
// the flags it begins ("--ttl or --timeout"), since any other flag of that
// length is one edit away and means nothing like it; for a longer name the
// closest flag, if it is close enough to be a typo.
func suggestFlags(s string, names []string) string {
	if len([]rune(s)) > 2 {
		if best := suggest(s, names); best != "" {
			return "--" + best
		}
		return ""
	}
	var begun []string
	for _, n := range names {
		if len(n) > len(s) && strings.HasPrefix(n, s) {
			begun = append(begun, "--"+n)
		}
	}
	switch len(begun) {
	case 0:
		return ""
	case 1:
		return begun[0]
	}
	return strings.Join(begun[:len(begun)-1], ", ") + " or " + begun[len(begun)-1]
}

// suggest returns the candidate closest to s, if it is close enough to be
// a typo of it.
func suggest(s string, candidates []string) string {
	best, bestD := "", 0
	for _, c := range candidates {
		d := editDistance(s, c)
		if d <= max(1, min(2, len(c)/3)) && (best == "" || d < bestD) {
			best, bestD = c, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance of a and b, a transposition
// counting as one edit ("aquire", "relaese").
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	// d[i][j]: distance of ra[:i] and rb[:j].
	d := make([][]int, len(ra)+1)
	for i := range d {
		d[i] = make([]int, len(rb)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(ra); i++ {
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(ra)][len(rb)]
}
