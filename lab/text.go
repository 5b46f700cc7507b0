package lab

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// text accumulates one block's output; formatting cannot fail, so the
// blocks build strings and the caller does the one write that can.
type text struct{ b strings.Builder }

func (t *text) printf(format string, args ...any) { fmt.Fprintf(&t.b, format, args...) }

// lines prints each line indented by two spaces, the lab's one margin.
func (t *text) lines(ls ...string) {
	for _, l := range ls {
		if l == "" {
			t.b.WriteString("\n")
			continue
		}
		t.b.WriteString("  " + l + "\n")
	}
}

func (t *text) heading(title, lesson string) {
	t.printf("%s\n", title)
	t.printf("  — %s\n\n", lesson)
}

func (t *text) String() string { return t.b.String() }

// secondsLabel prints a duration in seconds without trailing zeros: 1s,
// 0.5s, 10.1s.
func secondsLabel(d time.Duration) string {
	return strconv.FormatFloat(seconds(d), 'f', -1, 64) + "s"
}

// millisLabel prints a duration in milliseconds the same way: 1 ms, 1000 ms.
func millisLabel(d time.Duration) string {
	return strconv.FormatFloat(millis(d), 'f', -1, 64) + " ms"
}

// thousands prints 20000 as 20,000.
func thousands(n int) string {
	s := strconv.Itoa(n)
	if n < 0 {
		return "-" + thousands(-n)
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
