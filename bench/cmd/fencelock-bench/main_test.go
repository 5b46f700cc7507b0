package main

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/fencelock/fencelock/bench/internal/peerbench"
	"github.com/fencelock/fencelock/internal/testguard"
)

// Every system's default address points at a tripwire while the tests run
// (internal/testguard): a test that falls back to a default fails the run
// instead of writing into whatever listens there (a dev server on
// 127.0.0.1:7470, a peer of setup.sh).
func TestMain(m *testing.M) {
	os.Exit(testguard.Wrap(m, func(t *testguard.Tripwire) {
		for name := range peerbench.DefaultAddrs {
			peerbench.DefaultAddrs[name] = t.Addr()
		}
	}).Run())
}

// runCLI runs one command line in-process.
func runCLI(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errs strings.Builder
	e := &env{stdout: &out, stderr: &errs}
	code = exitCode(e, run(context.Background(), e, args))
	return out.String(), errs.String(), code
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"compare", "-h"}, {"run", "--help"}, {"failover", "-h"}} {
		out, errs, code := runCLI(t, args...)
		if code != exitOK || errs != "" || !strings.Contains(out, "Usage: fencelock-bench") {
			t.Errorf("%v: code %d, stderr %q, stdout %q; want usage on stdout, exit 0", args, code, errs, out)
		}
	}
	if _, _, code := runCLI(t); code != exitUsage {
		t.Errorf("no command: exit %d, want %d", code, exitUsage)
	}
}

// A usage error is one line on stderr, exit 2.
func TestUsageErrorsAreOneLine(t *testing.T) {
	for _, args := range [][]string{{"nope"}, {"compare", "--bogus"}, {"run", "--bogus"}, {"failover", "--bogus"}, {"failover", "--system", "etcd", "--addr", "a"}} {
		out, errs, code := runCLI(t, args...)
		if code != exitUsage || out != "" || strings.Count(errs, "\n") != 1 {
			t.Errorf("%v: code %d, stdout %q, stderr %q; want one line, exit 2", args, code, out, errs)
		}
	}
}
