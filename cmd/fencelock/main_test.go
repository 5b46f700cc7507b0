package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/fencelock/fencelock/internal/testguard"
)

// binary is the fencelock executable built once for the real-process tests.
var binary string

// guard is the tripwire that stands in for every default address while
// the tests run (internal/testguard): the client commands' and the
// server's default 127.0.0.1:7470, FENCELOCK_ADDR and FENCELOCK_LISTEN
// (which the binaries the tests start inherit). A test that reaches it
// fails the run.
var guard *testguard.Tripwire

func TestMain(m *testing.M) {
	os.Exit(testguard.Wrap(builder{m}, func(t *testguard.Tripwire) {
		guard = t
		defaultListen = t.Addr()
	}).Run())
}

type builder struct{ m *testing.M }

func (b builder) Run() int { return buildAndRun(b.m) }

func buildAndRun(m *testing.M) int {
	dir, err := os.MkdirTemp("", "fencelock-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	binary = filepath.Join(dir, "fencelock")
	build := exec.Command("go", "build", "-o", binary, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building fencelock:", err)
		return 1
	}
	return m.Run()
}
