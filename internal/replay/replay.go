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
// NOW and TTL are decimal seconds ("0", "10", "2.5"). Blank lines and lines
// whose first non-blank character is '#' are skipped.
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
)

// Call is one parsed line.
type Call struct {
	Op     Op
	Key    string
	Holder string
	Token  uint64
	Now    locktable.Time
	TTL    locktable.Duration
}

var usage = map[Op]string{
	OpAcquire: "acquire KEY HOLDER NOW TTL",
	OpRelease: "release KEY HOLDER NOW",
	OpValid:   "valid KEY TOKEN",
	OpCheck:   "check KEY TOKEN NOW",
	OpExtend:  "extend KEY HOLDER TOKEN NOW TTL",
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
	c := Call{Op: Op(f[0])}
	want, known := usage[c.Op]
	if !known {
		return Call{}, fmt.Errorf("unknown call %q (want acquire, release, valid, check or extend)", f[0])
	}
	if len(f) != len(strings.Fields(want)) {
		return Call{}, fmt.Errorf("%s takes %d arguments (%s), got %d", c.Op, len(strings.Fields(want))-1, want, len(f)-1)
	}
	var err error
	c.Key = f[1]
	switch c.Op {
	case OpAcquire:
		c.Holder = f[2]
		if c.Now, err = parseNow(f[3]); err == nil {
			c.TTL, err = parseTTL(f[4])
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
	}
	if err != nil {
		return Call{}, err
	}
	if len(c.Key) > locktable.MaxKeyLen {
		return Call{}, fmt.Errorf("KEY is %d bytes, the limit is %d", len(c.Key), locktable.MaxKeyLen)
	}
	if len(c.Holder) > locktable.MaxHolderLen {
		return Call{}, fmt.Errorf("HOLDER is %d bytes, the limit is %d", len(c.Holder), locktable.MaxHolderLen)
	}
	return c, nil
}

func parseToken(s string) (uint64, error) {
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("TOKEN %q is not a non-negative integer", s)
	}
	return v, nil
}

func parseNow(s string) (locktable.Time, error) {
	ns, err := parseSeconds(s)
	if err != nil {
		return 0, fmt.Errorf("NOW %q: %v", s, err)
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
		if errors.Is(err, locktable.ErrHeld) {
			return "None", nil
		}
		if err != nil {
			return "", err
		}
		return strconv.FormatUint(l.Token, 10), nil
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
	}
	return "", fmt.Errorf("unknown call %q", c.Op)
}

func pyBool(b bool) string {
	if b {
		return "True"
	}
	return "False"
}

// Run reads a script from r, writes one answer per call to out and one
// message per malformed line to errs, naming its line number. It returns
// the number of malformed lines; the error is only for failing to read r or
// write out.
func Run(r io.Reader, out, errs io.Writer) (bad int, err error) {
	t := locktable.New()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for n := 1; sc.Scan(); n++ {
		c, err := ParseLine(sc.Text())
		if errors.Is(err, ErrSkip) {
			continue
		}
		var answer string
		if err == nil {
			answer, err = Apply(t, c)
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
