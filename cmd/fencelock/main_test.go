package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/fencelock/fencelock/internal/clustersecret"
	"github.com/fencelock/fencelock/internal/testguard"
)

// builtBinary is the fencelock executable for the process tests, built
// once by TestMain; under -short it is not built.
var builtBinary string

// fencelockBinary is the built executable. A test that runs it, or starts
// a server process, belongs to the process tier: under -short this skips
// it. Every use of the binary goes through here, so a process test cannot
// land in the short tier by accident.
func fencelockBinary(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("process tier (runs the fencelock binary): skipped by -short")
	}
	return builtBinary
}

// guard is the tripwire that stands in for every default address while
// the tests run (internal/testguard): the client commands' and the
// server's default 127.0.0.1:7470, FENCELOCK_ADDR and FENCELOCK_LISTEN
// (which the binaries the tests start inherit). A test that reaches it
// fails the run.
var guard *testguard.Tripwire

func TestMain(m *testing.M) {
	// lock re-runs this binary as its watchdog; in a test binary that is
	// the test binary, which then is the watchdog and nothing else.
	if len(os.Args) > 1 && os.Args[1] == watchdogCommand {
		main()
	}
	os.Exit(testguard.Wrap(builder{m}, func(t *testguard.Tripwire) {
		guard = t
		defaultListen = t.Addr()
	}).Run())
}

// testSecretFile holds the cluster secret of the servers the process
// tests start.
var testSecretFile string

type builder struct{ m *testing.M }

func (b builder) Run() int { return buildAndRun(b.m) }

func buildAndRun(m *testing.M) int {
	flag.Parse() // testing.Short needs the flags
	if testing.Short() {
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "fencelock-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	builtBinary = filepath.Join(dir, "fencelock")
	// The cluster secret every server the tests start is given
	// (startProcVia), as the README's cluster is.
	sec, err := clustersecret.New()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	testSecretFile = filepath.Join(dir, "cluster.secret")
	if err := os.WriteFile(testSecretFile, []byte(sec.Encode()+"\n"), 0o600); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	build := exec.Command("go", "build", "-o", builtBinary, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building fencelock:", err)
		return 1
	}
	return m.Run()
}
