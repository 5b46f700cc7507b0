package main

import (
	"net"
	"strings"
	"testing"
)

func TestBenchUsage(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
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

// compare and bench --system moved to the bench module (bench/): asking
// the product binary for them says where they went, in one line (and a
// hint), exit 2.
func TestBenchMovedCommands(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"compare"}, "compare moved to the bench module: cd bench && go run ./cmd/fencelock-bench compare"},
		{[]string{"compare", "--systems", "redis", "--bogus"}, "compare moved to the bench module"},
		{[]string{"bench", "--system", "redis"}, "bench --system moved to the bench module: cd bench && go run ./cmd/fencelock-bench run --system"},
		{[]string{"bench", "-system=etcd", "--duration", "1s"}, "bench --system moved"},
		{[]string{"bench", "--workload", "w2"}, "bench --workload moved"},
	}
	for _, c := range cases {
		out, errs, code := runCLI(t, "", c.args...)
		// One line, and the hint under it (the one usage path).
		if code != exitUsage || !strings.Contains(errs, c.want) || strings.Count(errs, "\n") != 2 || out != "" {
			t.Errorf("%v: code %d, stdout %q, stderr %q; want 2 and one line with %q and a hint", c.args, code, out, errs, c.want)
		}
	}
	out, _, _ := runCLI(t, "", "help")
	if strings.Contains(out, "  compare ") {
		t.Errorf("help still lists compare:\n%s", out)
	}
}

func TestBenchUnreachable(t *testing.T) {
	// A port that was free a moment ago: nothing answers there.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, errs, code := runCLI(t, "", "bench", "--addr", addr, "--duration", "1s")
	if code != exitUnreachable || !strings.Contains(errs, "unreachable") {
		t.Errorf("code %d, stderr %q; want 3", code, errs)
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
