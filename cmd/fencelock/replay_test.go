package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// runCLI runs the binary's run function in-process.
func runCLI(t *testing.T, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errs strings.Builder
	e := &env{stdin: strings.NewReader(stdin), stdout: &out, stderr: &errs, getenv: func(string) string { return "" }}
	code = exitCode(e, run(context.Background(), e, args))
	return out.String(), errs.String(), code
}

func TestLabReplaySeedExample(t *testing.T) {
	script := "acquire resource client-a 0 10\nacquire resource client-b 5 10\nacquire resource client-b 10 10\nvalid resource 1\nvalid resource 2\n"
	out, errs, code := runCLI(t, script, "lab", "replay")
	if out != "1\nNone\n2\nFalse\nTrue\n" || code != 0 || errs != "" {
		t.Fatalf("stdout %q stderr %q code %d", out, errs, code)
	}
	path := filepath.Join(t.TempDir(), "seed.txt")
	if err := os.WriteFile(path, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, _, code := runCLI(t, "", "lab", "replay", path); out != "1\nNone\n2\nFalse\nTrue\n" || code != 0 {
		t.Fatalf("from file: %q %d", out, code)
	}
}

func TestLabReplayMalformedExits2AtTheEnd(t *testing.T) {
	out, errs, code := runCLI(t, "acquire k a 0 10\nacquire k b\nvalid k 1\n", "lab", "replay", "-")
	if out != "1\nTrue\n" || code != 2 || !strings.Contains(errs, "line 2:") {
		t.Fatalf("stdout %q stderr %q code %d", out, errs, code)
	}
}

func TestLabReplayMissingFile(t *testing.T) {
	_, errs, code := runCLI(t, "", "lab", "replay", filepath.Join(t.TempDir(), "nope"))
	if code != 2 || !strings.Contains(errs, "no such file") {
		t.Fatalf("stderr %q code %d", errs, code)
	}
}

func TestUnknownCommand(t *testing.T) {
	_, errs, code := runCLI(t, "", "frobnicate")
	if code != 2 || !strings.Contains(errs, "unknown command") {
		t.Fatalf("%q %d", errs, code)
	}
}
