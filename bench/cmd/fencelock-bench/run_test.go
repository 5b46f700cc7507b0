package main

import (
	"net"
	"strings"
	"testing"
)

func TestRunUsage(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"run"}, "--system must be one of"},
		{[]string{"run", "--system", "mysql"}, "--system must be one of"},
		{[]string{"run", "--system", "redis", "--workload", "w9"}, "--workload must be"},
		{[]string{"run", "--system", "redis", "--duration", "0s"}, "--duration must be positive"},
		{[]string{"run", "--system", "redis", "extra"}, `unexpected argument "extra"`},
	}
	for _, c := range cases {
		_, errs, code := runCLI(t, c.args...)
		if code != exitUsage || !strings.Contains(errs, c.want) {
			t.Errorf("%v: code %d, stderr %q; want 2 and %q", c.args, code, errs, c.want)
		}
	}
}

func TestRunUnreachable(t *testing.T) {
	// A port that was free a moment ago: nothing answers there.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	for _, sys := range []string{"fencelock", "redis"} {
		_, errs, code := runCLI(t, "run", "--system", sys, "--addr", addr, "--duration", "1s")
		if code != exitUnreachable || !strings.Contains(errs, "unreachable") {
			t.Errorf("%s: code %d, stderr %q; want 3", sys, code, errs)
		}
	}
}
