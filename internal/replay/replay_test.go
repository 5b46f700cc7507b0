package replay

import (
	"errors"
	"strings"
	"testing"
)

const seedExample = `# the seed exercise's worked example
acquire resource client-a 0 10
acquire resource client-b 5 10
acquire resource client-b 10 10
valid resource 1
valid resource 2
`

func run(t *testing.T, script string) (string, string, int) {
	t.Helper()
	var out, errs strings.Builder
	bad, err := Run(strings.NewReader(script), &out, &errs)
	if err != nil {
		t.Fatal(err)
	}
	return out.String(), errs.String(), bad
}

func TestSeedExample(t *testing.T) {
	out, errs, bad := run(t, seedExample)
	if out != "1\nNone\n2\nFalse\nTrue\n" || errs != "" || bad != 0 {
		t.Fatalf("out %q errs %q bad %d", out, errs, bad)
	}
}

func TestReleaseAndExtras(t *testing.T) {
	script := `
acquire k a 0 2.5
release k b 1
release k a 2.5
  # indented comment
check k 1 2.4
extend k a 1 2 10
check k 1 11.9
release k a 12
valid k 1
`
	out, errs, bad := run(t, script)
	want := "1\nFalse\nFalse\nTrue\n1\nTrue\nFalse\nTrue\n" // release at 12 is at expiry: too late
	if out != want || bad != 0 || errs != "" {
		t.Fatalf("out %q, want %q (errs %q)", out, want, errs)
	}
}

func TestMalformedLines(t *testing.T) {
	script := "acquire k a 0 10\n" + // 1
		"acquire k a 0\n" + // 2: too few
		"frobnicate k\n" + // 3: unknown
		"acquire k b x 10\n" + // 4: bad NOW
		"acquire k b 1 0\n" + // 5: zero TTL
		"acquire k b 1 -3\n" + // 6: negative TTL
		"valid k -1\n" + // 7: bad token
		"acquire k b 1 1e3\n" + // 8: exponent
		"acquire k b 1.0000000001 1\n" + // 9: sub-nanosecond
		"valid k 1\n" // 10
	out, errs, bad := run(t, script)
	if out != "1\nTrue\n" {
		t.Fatalf("stdout %q: malformed lines must print nothing", out)
	}
	if bad != 8 {
		t.Fatalf("bad = %d, want 8; stderr:\n%s", bad, errs)
	}
	for _, n := range []string{"line 2:", "line 3:", "line 4:", "line 5:", "line 6:", "line 7:", "line 8:", "line 9:"} {
		if !strings.Contains(errs, n) {
			t.Errorf("stderr does not name %s\n%s", n, errs)
		}
	}
}

func TestParseSecondsIsExact(t *testing.T) {
	cases := map[string]int64{"0": 0, "10": 10e9, "2.5": 2_500_000_000, "0.000000001": 1, "9.999999999": 9_999_999_999}
	for in, want := range cases {
		got, err := parseSeconds(in)
		if err != nil || got != want {
			t.Errorf("%s: %d %v, want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", ".", "1.", ".5", "+1", "-1", "1e3", "NaN", "99999999999999999999"} {
		if _, err := parseSeconds(in); err == nil {
			t.Errorf("%q parsed", in)
		}
	}
}

// FuzzParseLine: no line panics; every line parses, is skipped, or errors;
// and a parsed call runs against a table without panicking.
func FuzzParseLine(f *testing.F) {
	for _, l := range strings.Split(seedExample, "\n") {
		f.Add(l)
	}
	f.Add("extend k a 1 2 10")
	f.Add("check k 1 2.4")
	f.Add("acquire k a 99999999999.999999999 0.1")
	f.Add("wait k a 0 10 5")
	f.Add(`list "" 0 1`)
	f.Add("tick 4294967296")
	f.Fuzz(func(t *testing.T, line string) {
		c, err := ParseLine(line)
		if err != nil {
			if c != (Call{}) {
				t.Fatal("an error must come with an empty call")
			}
			return
		}
		if errors.Is(err, ErrSkip) {
			return
		}
		var out, errs strings.Builder
		if _, err := Run(strings.NewReader(line), &out, &errs); err != nil {
			t.Fatal(err)
		}
	})
}

func TestTableCallsBeyondTheExercise(t *testing.T) {
	script := `wait k a 0 10
wait k b 1 4 3
waiters k
next
tick 3
get k 3
list "" 3 1
cancel k b
len
wait k a 1
list k
tick -1
wait k a 0 10 x
list k 0 -2
`
	out, errs, bad := run(t, script)
	want := "1\nqueued\nb\n3\nok\na 1 granted=0 expiry=10 ttl=10 remaining=7\nk\nFalse\n1\n"
	if out != want || bad != 5 {
		t.Fatalf("out %q, want %q; bad %d, errs:\n%s", out, want, bad, errs)
	}
}

func TestFormatSeconds(t *testing.T) {
	for ns, want := range map[int64]string{0: "0", 10e9: "10", 2_500_000_000: "2.5", 1: "0.000000001", -1_500_000_000: "-1.5"} {
		if got := FormatSeconds(ns); got != want {
			t.Errorf("%d: %q, want %q", ns, got, want)
		}
	}
}
