package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fencelock/fencelock/lab"
)

// runIn runs the binary's run() in-process and returns stdout, stderr and
// the exit status main would use.
func runIn(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	e := &env{stdin: strings.NewReader(""), stdout: &out, stderr: &errb, getenv: func(string) string { return "" }}
	code := exitCode(e, run(context.Background(), e, args))
	return out.String(), errb.String(), code
}

func TestLabDefaultIsTheLabPackagesOutput(t *testing.T) {
	got, stderr, code := runIn(t, "lab")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var want bytes.Buffer
	if err := lab.Print(&want, lab.Options{Config: lab.DefaultConfig()}); err != nil {
		t.Fatal(err)
	}
	if got != want.String() {
		t.Errorf("fencelock lab differs from lab.Print at the defaults")
	}
}

func TestLabFlags(t *testing.T) {
	cases := []struct {
		args []string
		code int
		has  string // a line fragment stdout or stderr must contain
	}{
		{[]string{"lab", "--block", "5"}, 0, "16.53%"},
		{[]string{"lab", "--quiet"}, 0, "465"},
		{[]string{"lab", "--verify"}, 0, "17/17 claims hold"},
		{[]string{"lab", "--verify", "--block", "7"}, 0, "710 of 20000"},
		{[]string{"lab", "--verify", "--n", "10"}, exitNo, "FAIL"},
		{[]string{"lab", "--seed", "99", "--n", "5000", "--block", "5"}, 0, "16.34%"},
		{[]string{"lab", "--seed", "99", "--n", "5000", "--quiet"}, 0, "3.240%"},
		{[]string{"lab", "--ttls", "500ms,2s", "--block", "5"}, 0, "41.67%"},
		{[]string{"lab", "--ttls", "0.5,2s", "--block", "5"}, exitUsage, "a duration needs a unit"},
		{[]string{"lab", "--gaps", "2s", "--quiet"}, 0, "531"},
		{[]string{"lab", "--block", "9"}, exitUsage, "want 1..6"},
		{[]string{"lab", "--quiet", "--block", "2"}, exitUsage, "does not combine"},
		{[]string{"lab", "--n", "0"}, exitUsage, "operation count"},
		{[]string{"lab", "--ttls", "soon"}, exitUsage, "-ttls"},
		{[]string{"lab", "--check-gap", "1s", "--quiet"}, 0, "2.325%"},
		{[]string{"lab", "--nope"}, exitUsage, "flag provided but not defined"},
		{[]string{"lab", "extra"}, exitUsage, "unexpected argument"},
		{[]string{"lab", "-h"}, 0, "Usage: fencelock lab"},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args[1:], " "), func(t *testing.T) {
			out, errs, code := runIn(t, c.args...)
			if code != c.code {
				t.Errorf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, c.code, out, errs)
			}
			if !strings.Contains(out+errs, c.has) {
				t.Errorf("output lacks %q\nstdout:\n%s\nstderr:\n%s", c.has, out, errs)
			}
		})
	}
}

func TestLabReplayIsDispatched(t *testing.T) {
	// Whatever replay makes of its input, the lab's own flag parsing must
	// never see the word.
	_, errs, _ := runIn(t, "lab", "replay", "-")
	if strings.Contains(errs, "unexpected argument") {
		t.Errorf("lab parsed replay as its own argument: %s", errs)
	}
}

func TestLabPlot(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "charts")
	_, errs, code := runIn(t, "lab", "--quiet", "--plot", dir)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, c := range lab.Charts {
		b, err := os.ReadFile(filepath.Join(dir, c.File))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(b, []byte("<svg")) || !bytes.HasSuffix(b, []byte("</svg>\n")) {
			t.Errorf("%s is not a complete SVG", c.File)
		}
	}
}
