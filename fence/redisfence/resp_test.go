package redisfence

import (
	"bufio"
	"fmt"
	"strings"
	"testing"
)

// The reply reader, on what a server sends and on what it must refuse.
func TestReadReply(t *testing.T) {
	for _, c := range []struct {
		in, want string
	}{
		{"+OK\r\n", "OK"},
		{"-ERR wrong\r\n", "redis: ERR wrong"},
		{":42\r\n", "42"},
		{"$5\r\nhello\r\n", "hello"},
		{"$0\r\n\r\n", ""},
		{"$-1\r\n", "<nil>"},
		{"*-1\r\n", "<nil>"},
		{"*3\r\n:1\r\n$1\r\na\r\n*1\r\n-NOSCRIPT x\r\n", "[1 a [redis: NOSCRIPT x]]"}, // an error inside an array stays a value
		{"$5\r\nhel\r\n", "error"},
		{"$5\r\nhelloXY", "error"},
		{"$999999999999\r\n", "error"},
		{"*99999999\r\n", "error"},
		{"!3\r\nabc\r\n", "error"},
		{"+no crlf\n", "error"},
		{":x\r\n", "error"},
		{"\r\n", "error"},
		{strings.Repeat("*1\r\n", 20) + ":1\r\n", "error"},
	} {
		got, err := readReply(bufio.NewReader(strings.NewReader(c.in)), 0)
		s := fmt.Sprint(got)
		if err != nil {
			s = "error"
		}
		if !strings.HasPrefix(s, c.want) {
			t.Fatalf("%q: %s (%v), want %s", c.in, s, err, c.want)
		}
	}
}

// FuzzReadReply: any bytes give a reply or an error, never a panic or
// an allocation past the limits.
func FuzzReadReply(f *testing.F) {
	for _, s := range []string{"+OK\r\n", "$3\r\nabc\r\n", "*2\r\n:1\r\n$-1\r\n", "-ERR x\r\n", "*1\r\n*1\r\n*0\r\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = readReply(bufio.NewReader(strings.NewReader(string(b))), 0)
	})
}
