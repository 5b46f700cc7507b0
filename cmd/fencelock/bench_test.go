package main

import (
	"net"
	"strings"
	"testing"
)

func TestBenchSystemUsage(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"bench", "--system", "mysql"}, "--system must be one of"},
		{[]string{"bench", "--system", "redis", "--workload", "w9"}, "--workload must be"},
		{[]string{"bench", "--mode", "sideways"}, "--mode must be"},
		{[]string{"bench", "--clients", "0"}, "--clients must be"},
	}
	for _, c := range cases {
		_, errs, code := runCLI(t, "", c.args...)
		if code != exitUsage || !strings.Contains(errs, c.want) {
			t.Errorf("%v: code %d, stderr %q; want 2 and %q", c.args, code, errs, c.want)
		}
	}
}

func TestBenchSystemUnreachable(t *testing.T) {
	// A port that was free a moment ago: nothing answers there.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	for _, sys := range []string{"fencelock", "redis"} {
		_, errs, code := runCLI(t, "", "bench", "--system", sys, "--addr", addr, "--duration", "1s")
		if code != exitUnreachable || !strings.Contains(errs, "unreachable") {
			t.Errorf("%s: code %d, stderr %q; want 3", sys, code, errs)
		}
	}
}

// An address list with no address is bad usage, not a crash.
func TestEmptyAddressListsAreUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"cluster", "members", "--addr", ","},
		{"server", "--id", "n1", "--raft", "127.0.0.1:1", "--join", " , ", "--data", t.TempDir()},
	} {
		_, errs, code := runCLI(t, "", args...)
		if code != exitUsage || !strings.Contains(errs, "names no address") {
			t.Errorf("%v: code %d, stderr %q; want 2", args, code, errs)
		}
	}
}
