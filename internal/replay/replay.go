// Package replay runs lock calls written in the seed exercise's terms
// against the core lock table, one call per line, and prints one answer per
// line in the exercise's terms (a token or None, True or False), so anyone
// can step through the exercise and compare with their own solution.
//
//	acquire KEY HOLDER NOW TTL     -> the new token, or None
//	release KEY HOLDER NOW         -> True if it released, else False
//	valid KEY TOKEN                -> True or False (is_valid_token)
//
// Two calls beyond the exercise use the same table:
//
//	check KEY TOKEN NOW            -> True or False (valid and alive at NOW)
//	extend KEY HOLDER TOKEN NOW TTL -> the same token, or None if refused
//
// The rest of the table is reachable too, for the lock table's data-driven
// tests (internal/locktable/testdata):
//
//	wait KEY HOLDER NOW TTL [DEADLINE] -> the new token, queued, or None
//	cancel KEY HOLDER              -> True if HOLDER was queued (CancelWait)
//	tick NOW                       -> ok (expiries and late waiters at NOW)
//	get KEY NOW                    -> HOLDER TOKEN granted= expiry= ttl= remaining=, or None
//	list PREFIX NOW [LIMIT]        -> the live keys, or (none); PREFIX "" is every key
//	waiters KEY                    -> the queued holders, head first, or (none)
//	next                           -> the next deadline (NextDeadline), or None
//	len                            -> the number of keys the table tracks
//	shared KEY HOLDER KIND NOW TTL [DEADLINE] -> the new token, queued, None,
//	                                  or mismatch (AcquireShared; KIND is
//	                                  sem:N, read or write; no DEADLINE: try once)
//	holders KEY NOW                -> HOLDER:TOKEN per live holder (a
//	                                  semaphore's with /SLOT, a reader's with r,
//	                                  a writer's with w), or (none)
//
// Sessions, multi-key acquire and lock-delay (docs/PRIMITIVES.md):
//
//	session-open HOLDER NOW TTL    -> the new session's id
//	session-extend ID HOLDER NOW   -> expiry=S, or None (no such live session)
//	session-close ID HOLDER NOW    -> released=N (its locks), or None
//	session-keys ID                -> the keys held under it, or (none)
//	acquire-session KEY HOLDER NOW ID -> the new token, None, or delayed until=S
//	wait-session KEY HOLDER NOW ID [DEADLINE] -> the new token, queued, None
//	acquire-all KEY,KEY,... HOLDER NOW TTL -> KEY=TOKEN ..., or None (nothing granted)
//	acquire-delay KEY HOLDER NOW TTL DELAY -> the new token, None, or delayed until=S
//
// acquire and wait also answer "delayed until=S" for a key in its
// lock-delay.
//
// NOW, TTL and DEADLINE are decimal seconds ("0", "10", "2.5"). Blank lines
// and lines whose first non-blank character is '#' are skipped.
package replay

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/fencelock/fencelock/internal/locktable"
)

// Op names a call.
type Op string

// The calls a script may make.
const (
	OpAcquire Op = "acquire"
	OpRelease Op = "release"
	OpValid   Op = "valid"
	OpCheck   Op = "check"
	OpExtend  Op = "extend"
	OpWait    Op = "wait"
	OpCancel  Op = "cancel"
	OpTick    Op = "tick"
	OpGet     Op = "get"
	OpList    Op = "list"
	OpWaiters Op = "waiters"
	OpNext    Op = "next"
	OpLen     Op = "len"

	OpSessionOpen   Op = "session-open"
	OpSessionExtend Op = "session-extend"
	OpSessionClose  Op = "session-close"
	OpSessionKeys   Op = "session-keys"
	OpAcqSession    Op = "acquire-session"
	OpWaitSession   Op = "wait-session"
	OpAcquireAll    Op = "acquire-all"
	OpAcquireDelay  Op = "acquire-delay"

	OpShared  Op = "shared"  // semaphores and read/write locks
	OpHolders Op = "holders" // every live holder of a key
)

// Call is one parsed line.
type Call struct {
	Op       Op
	Key      string // the key, or list's prefix
	Holder   string
	Token    uint64
	Now      locktable.Time
	TTL      locktable.Duration
	Deadline locktable.Time // wait's; locktable.NoDeadline when not given
	Limit    int            // list's; 0 is no limit
	Session  uint64         // the session calls' ID
	Delay    locktable.Duration
	Shared   locktable.Shared
}

// usage is each call's form; arguments in brackets may be left out.
var usage = map[Op]string{
	OpAcquire: "acquire KEY HOLDER NOW TTL",
	OpRelease: "release KEY HOLDER NOW",
	OpValid:   "valid KEY TOKEN",
	OpCheck:   "check KEY TOKEN NOW",
	OpExtend:  "extend KEY HOLDER TOKEN NOW TTL",
	OpWait:    "wait KEY HOLDER NOW TTL [DEADLINE]",
	OpCancel:  "cancel KEY HOLDER",
	OpTick:    "tick NOW",
	OpGet:     "get KEY NOW",
	OpList:    "list PREFIX NOW [LIMIT]",
	OpWaiters: "waiters KEY",
	OpNext:    "next",
	OpLen:     "len",

	OpSessionOpen:   "session-open HOLDER NOW TTL",
	OpSessionExtend: "session-extend ID HOLDER NOW",
	OpSessionClose:  "session-close ID HOLDER NOW",
	OpSessionKeys:   "session-keys ID",
	OpAcqSession:    "acquire-session KEY HOLDER NOW ID",
	OpWaitSession:   "wait-session KEY HOLDER NOW ID [DEADLINE]",
	OpAcquireAll:    "acquire-all KEYS HOLDER NOW TTL",
	OpAcquireDelay:  "acquire-delay KEY HOLDER NOW TTL DELAY",

	OpShared:  "shared KEY HOLDER KIND NOW TTL [DEADLINE]",
	OpHolders: "holders KEY NOW",
}

// ErrSkip is ParseLine's answer for a blank or comment line.
var ErrSkip = errors.New("replay: nothing to run")

// ParseLine parses one line. It returns ErrSkip for blank and comment lines
// and a descriptive error for anything malformed.
func ParseLine(line string) (Call, error) {
	f := strings.Fields(line)
	if len(f) == 0 || strings.HasPrefix(f[0], "#") {
		return Call{}, ErrSkip
	}
	c := Call{Op: Op(f[0]), Deadline: locktable.NoDeadline}
	want, known := usage[c.Op]
	if !known {
		return Call{}, fmt.Errorf("unknown call %q (want acquire, release, valid, check, extend, wait, cancel, tick, get, list, waiters, next, len, shared, holders or a session call: session-open, session-extend, session-close, session-keys, acquire-session, wait-session, acquire-all, acquire-delay)", f[0])
	}
	maxArgs := len(strings.Fields(want)) - 1
	minArgs := maxArgs - strings.Count(want, "[")
	if n := len(f) - 1; n < minArgs || n > maxArgs {
		takes := strconv.Itoa(maxArgs)
		if minArgs != maxArgs {
			takes = fmt.Sprintf("%d or %d", minArgs, maxArgs)
		}
		return Call{}, fmt.Errorf("%s takes %s arguments (%s), got %d", c.Op, takes, want, n)
	}
	var err error
	if len(f) > 1 {
		c.Key = f[1]
	}
	switch c.Op {
	case OpAcquire, OpWait:
		c.Holder = f[2]
		if c.Now, err = parseNow(f[3]); err == nil {
			c.TTL, err = parseTTL(f[4])
		}
		if err == nil && len(f) == 6 {
			c.Deadline, err = parseTime("DEADLINE", f[5])
		}
	case OpRelease:
		c.Holder = f[2]
		c.Now, err = parseNow(f[3])
	case OpValid:
		c.Token, err = parseToken(f[2])
	case OpCheck:
		if c.Token, err = parseToken(f[2]); err == nil {
			c.Now, err = parseNow(f[3])
		}
	case OpExtend:
		c.Holder = f[2]
		if c.Token, err = parseToken(f[3]); err == nil {
			if c.Now, err = parseNow(f[4]); err == nil {
				c.TTL, err = parseTTL(f[5])
			}
		}
	case OpCancel:
		c.Holder = f[2]
	case OpShared:
		c.Holder, c.Deadline = f[2], 0
		if c.Shared, err = parseKind(f[3]); err == nil {
			if c.Now, err = parseNow(f[4]); err == nil {
				c.TTL, err = parseTTL(f[5])
			}
		}
		if err == nil && len(f) == 7 {
			c.Deadline, err = parseTime("DEADLINE", f[6])
		}
	case OpHolders:
		c.Now, err = parseNow(f[2])
	case OpTick:
		c.Key = ""
		c.Now, err = parseNow(f[1])
	case OpGet:
		c.Now, err = parseNow(f[2])
	case OpSessionOpen:
		c.Key, c.Holder = "", f[1]
		if c.Now, err = parseNow(f[2]); err == nil {
			c.TTL, err = parseTTL(f[3])
		}
	case OpSessionExtend, OpSessionClose:
		c.Key, c.Holder = "", f[2]
		if c.Session, err = parseToken(f[1]); err == nil {
			c.Now, err = parseNow(f[3])
		}
	case OpSessionKeys:
		c.Key = ""
		c.Session, err = parseToken(f[1])
	case OpAcqSession, OpWaitSession:
		c.Holder = f[2]
		if c.Now, err = parseNow(f[3]); err == nil {
			c.Session, err = parseToken(f[4])
		}
		if err == nil && len(f) == 6 {
			c.Deadline, err = parseTime("DEADLINE", f[5])
		}
	case OpAcquireAll, OpAcquireDelay:
		c.Holder = f[2]
		if c.Now, err = parseNow(f[3]); err == nil {
			c.TTL, err = parseTTL(f[4])
		}
		if err == nil && c.Op == OpAcquireDelay {
			var d locktable.Time
			d, err = parseTime("DELAY", f[5])
			c.Delay = locktable.Duration(d)
		}
	case OpList:
		if c.Key == `""` { // the empty prefix: every key
			c.Key = ""
		}
		if c.Now, err = parseNow(f[2]); err == nil && len(f) == 4 {
			c.Limit, err = parseLimit(f[3])
		}
	}
	if err != nil {
		return Call{}, err
	}
	if len(c.Key) > locktable.MaxKeyLen && c.Op != OpAcquireAll {
		return Call{}, fmt.Errorf("KEY is %d bytes, the limit is %d", len(c.Key), locktable.MaxKeyLen)
	}
	if len(c.Holder) > locktable.MaxHolderLen {
		return Call{}, fmt.Errorf("HOLDER is %d bytes, the limit is %d", len(c.Holder), locktable.MaxHolderLen)
	}
	return c, nil
}

// parseKind reads shared's KIND: sem:N, read or write.
func parseKind(s string) (locktable.Shared, error) {
	switch {
	case s == "read":
		return locktable.Shared{Kind: locktable.ReadWrite}, nil
	case s == "write":
		return locktable.Shared{Kind: locktable.ReadWrite, Write: true}, nil
	case strings.HasPrefix(s, "sem:"):
		n, err := strconv.Atoi(s[len("sem:"):])
		if err == nil && n > 0 {
			return locktable.Shared{Kind: locktable.Semaphore, Permits: n}, nil
		}
	}
	return locktable.Shared{}, fmt.Errorf("KIND %q: want sem:N, read or write", s)
}

func parseLimit(s string) (int, error) {
	v, err := strconv.ParseUint(s, 10, 31)
	if err != nil {
		return 0, fmt.Errorf("LIMIT %q is not a non-negative integer", s)
	}
	return int(v), nil
}

func parseToken(s string) (uint64, error) {
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("TOKEN %q is not a non-negative integer", s)
	}
	return v, nil
}

func parseNow(s string) (locktable.Time, error) { return parseTime("NOW", s) }

func parseTime(name, s string) (locktable.Time, error) {
	ns, err := parseSeconds(s)
	if err != nil {
		return 0, fmt.Errorf("%s %q: %v", name, s, err)
	}
	return locktable.Time(ns), nil
}

func parseTTL(s string) (locktable.Duration, error) {
	ns, err := parseSeconds(s)
	if err != nil {
		return 0, fmt.Errorf("TTL %q: %v", s, err)
	}
	if ns == 0 {
		return 0, fmt.Errorf("TTL %q: must be greater than 0", s)
	}
	return locktable.Duration(ns), nil
}

// maxSeconds keeps NOW+TTL inside the table's nanosecond clock.
const maxSeconds = 1 << 32

// parseSeconds reads a plain decimal number of seconds ("10", "2.5",
// "0.000000001") exactly, as nanoseconds: no exponents, no signs, no
// precision finer than a nanosecond.
func parseSeconds(s string) (int64, error) {
	whole, frac, hasDot := strings.Cut(s, ".")
	if whole == "" || (hasDot && frac == "") || !digits(whole) || !digits(frac) {
		return 0, errors.New("want a decimal number of seconds such as 0, 10 or 2.5")
	}
	if len(frac) > 9 {
		return 0, errors.New("finer than a nanosecond")
	}
	w, err := strconv.ParseInt(whole, 10, 64)
	if err != nil || w > maxSeconds {
		return 0, fmt.Errorf("more than %d seconds", int64(maxSeconds))
	}
	var f int64
	if frac != "" {
		f, _ = strconv.ParseInt(frac+strings.Repeat("0", 9-len(frac)), 10, 64)
	}
	return w*1e9 + f, nil
}

func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// Apply runs c against t and returns its answer in the exercise's terms.
func Apply(t *locktable.Table, c Call) (string, error) {
	switch c.Op {
	case OpAcquire:
		l, err := t.Acquire(c.Key, c.Holder, c.Now, c.TTL)
		return grantAnswer(l, err)
	case OpRelease:
		ok, err := t.Release(c.Key, c.Holder, c.Now)
		return pyBool(ok), err
	case OpValid:
		return pyBool(t.IsValidToken(c.Key, c.Token)), nil
	case OpCheck:
		return pyBool(t.Check(c.Key, c.Token, c.Now)), nil
	case OpExtend:
		l, err := t.Extend(c.Key, c.Holder, c.Token, c.Now, c.TTL)
		if errors.Is(err, locktable.ErrNotHeld) {
			return "None", nil
		}
		if err != nil {
			return "", err
		}
		return strconv.FormatUint(l.Token, 10), nil
	case OpWait:
		l, granted, err := t.Wait(c.Key, c.Holder, c.Now, c.TTL, c.Deadline)
		if err == nil && !granted {
			return "queued", nil
		}
		return grantAnswer(l, err)
	case OpCancel:
		return pyBool(t.CancelWait(c.Key, c.Holder)), nil
	case OpTick:
		t.Tick(c.Now)
		return "ok", nil
	case OpGet:
		l, ok := t.Get(c.Key, c.Now)
		if !ok {
			return "None", nil
		}
		return fmt.Sprintf("%s %d granted=%s expiry=%s ttl=%s remaining=%s", l.Holder, l.Token,
			FormatSeconds(int64(l.Granted)), FormatSeconds(int64(l.Expiry)),
			FormatSeconds(int64(l.TTL)), FormatSeconds(int64(l.Remaining(c.Now)))), nil
	case OpList:
		var keys []string
		for _, l := range t.List(c.Key, c.Now, c.Limit) {
			keys = append(keys, l.Key)
		}
		return words(keys), nil
	case OpWaiters:
		return words(t.Waiters(c.Key)), nil
	case OpNext:
		at, ok := t.NextDeadline()
		if !ok {
			return "None", nil
		}
		return FormatSeconds(int64(at)), nil
	case OpLen:
		return strconv.Itoa(t.Len()), nil
	case OpShared:
		l, granted, err := t.AcquireShared(c.Key, c.Holder, c.Shared, c.Now, c.TTL, c.Deadline, locktable.WaitLimits{})
		switch {
		case errors.Is(err, locktable.ErrHeld):
			return "None", nil
		case errors.Is(err, locktable.ErrKindMismatch):
			return "mismatch", nil
		case err != nil:
			return "", err
		case !granted:
			return "queued", nil
		}
		return strconv.FormatUint(l.Token, 10), nil
	case OpHolders:
		var hs []string
		for _, l := range t.Holders(c.Key, c.Now) {
			h := fmt.Sprintf("%s:%d", l.Holder, l.Token)
			switch {
			case l.Kind == locktable.Semaphore:
				h += fmt.Sprintf("/%d", l.Slot)
			case l.Kind == locktable.ReadWrite && l.Write:
				h += "w"
			case l.Kind == locktable.ReadWrite:
				h += "r"
			}
			hs = append(hs, h)
		}
		return words(hs), nil
	}
	if answer, ok, err := applySession(t, c); ok {
		return answer, err
	}
	return "", fmt.Errorf("unknown call %q", c.Op)
}

// words joins ss with spaces; an empty list is "(none)".
func words(ss []string) string {
	if len(ss) == 0 {
		return "(none)"
	}
	return strings.Join(ss, " ")
}

// FormatSeconds writes ns nanoseconds as the decimal seconds the scripts
// use ("0", "10", "2.5"), exactly.
func FormatSeconds(ns int64) string {
	sign := ""
	if ns < 0 {
		sign, ns = "-", -ns
	}
	whole, frac := ns/1e9, ns%1e9
	if frac == 0 {
		return sign + strconv.FormatInt(whole, 10)
	}
	return sign + strconv.FormatInt(whole, 10) + "." + strings.TrimRight(fmt.Sprintf("%09d", frac), "0")
}

// FormatEvent writes one table event on a line of its own:
//
//	event granted KEY HOLDER TOKEN since=S expiry=E
//	event released KEY HOLDER TOKEN
//	event expired KEY HOLDER TOKEN
//	event wait-dropped KEY HOLDER since=S
func FormatEvent(ev locktable.Event) string {
	switch ev.Kind {
	case locktable.EventGranted:
		return fmt.Sprintf("event %s %s %s %d since=%s expiry=%s", ev.Kind, ev.Key, ev.Holder, ev.Token,
			FormatSeconds(int64(ev.Since)), FormatSeconds(int64(ev.Expiry)))
	case locktable.EventWaitDropped:
		return fmt.Sprintf("event %s %s %s since=%s", ev.Kind, ev.Key, ev.Holder, FormatSeconds(int64(ev.Since)))
	}
	return fmt.Sprintf("event %s %s %s %d", ev.Kind, ev.Key, ev.Holder, ev.Token)
}

func pyBool(b bool) string {
	if b {
		return "True"
	}
	return "False"
}

// Session is one table and the script lines run against it so far.
type Session struct {
	table  *locktable.Table
	trace  bool
	events []locktable.Event
}

// NewSession starts a session on an empty table. With trace, each answer is
// followed by the table's events that call caused, one FormatEvent line
// each (the data-driven tests use it; the exercise's answers do not).
func NewSession(trace bool) *Session {
	s := &Session{table: locktable.New(), trace: trace}
	if trace {
		s.table.SetObserver(func(ev locktable.Event) {
			// A waiter joining or cancelling is what the call's own
			// answer ("queued", a cancel) already says; traces show
			// what the table did besides, as they always have.
			if ev.Kind != locktable.EventWaitJoined && ev.Kind != locktable.EventWaitLeft {
				s.events = append(s.events, ev)
			}
		})
	}
	return s
}

// Exec parses and runs one line. It returns ErrSkip for a blank or comment
// line, an error for a malformed one, and otherwise the answer (and, when
// tracing, its events), without a final newline.
func (s *Session) Exec(line string) (string, error) {
	c, err := ParseLine(line)
	if err != nil {
		return "", err
	}
	s.events = s.events[:0]
	answer, err := Apply(s.table, c)
	if err != nil {
		return "", err
	}
	for _, ev := range s.events {
		answer += "\n" + FormatEvent(ev)
	}
	return answer, nil
}

// Run reads a script from r, writes one answer per call to out and one
// message per malformed line to errs, naming its line number. It returns
// the number of malformed lines; the error is only for failing to read r or
// write out.
func Run(r io.Reader, out, errs io.Writer) (bad int, err error) {
	s := NewSession(false)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for n := 1; sc.Scan(); n++ {
		answer, err := s.Exec(sc.Text())
		if errors.Is(err, ErrSkip) {
			continue
		}
		if err != nil {
			bad++
			fmt.Fprintf(errs, "line %d: %v\n", n, err)
			continue
		}
		if _, err := fmt.Fprintln(out, answer); err != nil {
			return bad, err
		}
	}
	if err := sc.Err(); err != nil {
		return bad, fmt.Errorf("reading script: %w", err)
	}
	return bad, nil
}

// grantAnswer is a grant's answer: the token, None when held, "delayed
// until=S" in a lock-delay.
func grantAnswer(l locktable.Lease, err error) (string, error) {
	var delay *locktable.LockDelayError
	switch {
	case errors.Is(err, locktable.ErrHeld):
		return "None", nil
	case errors.As(err, &delay):
		return "delayed until=" + FormatSeconds(int64(delay.Until)), nil
	case err != nil:
		return "", err
	}
	return strconv.FormatUint(l.Token, 10), nil
}

// applySession runs the session, multi-key and lock-delay calls; ok is
// false for any other call.
func applySession(t *locktable.Table, c Call) (answer string, ok bool, err error) {
	none := func(err error) (string, bool, error) {
		if errors.Is(err, locktable.ErrNoSession) {
			return "None", true, nil
		}
		return "", true, err
	}
	switch c.Op {
	case OpSessionOpen:
		s, err := t.OpenSession(c.Holder, c.Now, c.TTL)
		if err != nil {
			return "", true, err
		}
		return strconv.FormatUint(s.ID, 10), true, nil
	case OpSessionExtend:
		s, err := t.ExtendSession(c.Session, c.Holder, c.Now)
		if err != nil {
			return none(err)
		}
		return "expiry=" + FormatSeconds(int64(s.Expiry)), true, nil
	case OpSessionClose:
		s, err := t.CloseSession(c.Session, c.Holder, c.Now)
		if err != nil {
			return none(err)
		}
		return "released=" + strconv.Itoa(s.Locks), true, nil
	case OpSessionKeys:
		return words(t.SessionKeys(c.Session)), true, nil
	case OpAcqSession:
		l, err := t.AcquireWith(c.Key, c.Holder, c.Now, 0, locktable.Options{Session: c.Session})
		if errors.Is(err, locktable.ErrNoSession) {
			return none(err)
		}
		a, err := grantAnswer(l, err)
		return a, true, err
	case OpWaitSession:
		l, granted, err := t.WaitWith(c.Key, c.Holder, c.Now, 0, c.Deadline, locktable.WaitLimits{}, locktable.Options{Session: c.Session})
		if errors.Is(err, locktable.ErrNoSession) {
			return none(err)
		}
		if err == nil && !granted {
			return "queued", true, nil
		}
		a, err := grantAnswer(l, err)
		return a, true, err
	case OpAcquireAll:
		ls, err := t.AcquireAll(strings.Split(c.Key, ","), c.Holder, c.Now, c.TTL, locktable.Options{})
		if err != nil {
			a, err := grantAnswer(locktable.Lease{}, err)
			return a, true, err
		}
		out := make([]string, len(ls))
		for i, l := range ls {
			out[i] = l.Key + "=" + strconv.FormatUint(l.Token, 10)
		}
		return strings.Join(out, " "), true, nil
	case OpAcquireDelay:
		l, err := t.AcquireWith(c.Key, c.Holder, c.Now, c.TTL, locktable.Options{LockDelay: c.Delay})
		a, err := grantAnswer(l, err)
		return a, true, err
	}
	return "", false, nil
}
