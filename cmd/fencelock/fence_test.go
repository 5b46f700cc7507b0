package main

import (
	"context"
	"encoding/json"
	"math"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fencelock/fencelock/fence/filefence"
)

// Finding 1 of issue 25: nothing showed or mended a mark that a made-up
// token had raised. 'fence marks' shows it, 'fence reset' lowers it while
// nothing else has the directory, and the real holder writes again.
func TestFenceMarksAndReset(t *testing.T) {
	dir := t.TempDir()
	ff, err := filefence.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for res, tok := range map[string]uint64{"/v/a": math.MaxUint64, "/v/b": 7, "with space": 3} {
		if err := ff.Admit(ctx, res, tok, nil); err != nil {
			t.Fatal(err)
		}
	}

	out, errs, code := runCLI(t, "", "fence", "marks", "--state", dir)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || errs != "" || len(lines) != 4 || !strings.HasPrefix(lines[0], "RESOURCE") ||
		strings.Join(strings.Fields(lines[1])[:4], " ") != "/v/a 18446744073709551615 18446744073709551615 -" ||
		!strings.HasPrefix(lines[3], `"with space"`) {
		t.Fatalf("marks (while the fence is open): exit %d stderr %q\n%s", code, errs, out)
	}
	out, _, code = runCLI(t, "", "fence", "marks", "--state", dir, "--json")
	var listed []map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &listed) != nil || len(listed) != 3 || listed[1]["token"] != 7.0 {
		t.Fatalf("marks --json: %d %s", code, out)
	}

	_, errs, code = runCLI(t, "", "fence", "reset", "--state", dir, "--resource", "/v/a", "--to", "6")
	if code != exitNo || !strings.Contains(errs, "refused: another process has") {
		t.Fatalf("reset while the fence is open: exit %d %q", code, errs)
	}
	ff.Close()
	for _, args := range [][]string{
		{"--state", dir, "--resource", "/v/a"},
		{"--state", dir, "--to", "6"},
		{"--resource", "/v/a", "--to", "6"},
		{"--state", dir, "--resource", "/v/a", "--to", "-1"},
	} {
		if _, errs, code := runCLI(t, "", append([]string{"fence", "reset"}, args...)...); code != exitUsage {
			t.Fatalf("%q: exit %d %q", args, code, errs)
		}
	}
	if _, errs, code := runCLI(t, "", "fence", "reset", "--state", dir, "--resource", "/v/zzz", "--to", "6"); code != exitNo || !strings.Contains(errs, "no mark") {
		t.Fatalf("reset of an unknown resource: exit %d %q", code, errs)
	}
	out, errs, code = runCLI(t, "", "fence", "reset", "--state", dir, "--resource", "/v/a", "--to", "6")
	if code != 0 || out != `reset "/v/a": mark 18446744073709551615 -> 6, last write 18446744073709551615 -> 6`+"\n" {
		t.Fatalf("reset: exit %d %q %q", code, out, errs)
	}
	if log, _ := os.ReadFile(filepath.Join(dir, "resets.log")); !strings.Contains(string(log), strings.TrimSpace(out)) {
		t.Fatalf("resets.log: %q", log)
	}
	ff, err = filefence.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ff.Close()
	if err := ff.Admit(ctx, "/v/a", 10, nil); err != nil {
		t.Fatalf("the real holder after the reset: %v", err)
	}
	if ff.Highest("/v/b") != 7 {
		t.Fatal("the reset touched another mark")
	}
}

// The proxy process holds its --state: a reset is refused while it runs.
func TestFenceResetRefusedWhileTheProxyRuns(t *testing.T) {
	up := &recordingUpstream{}
	upstream := httptest.NewServer(up)
	defer upstream.Close()
	state := t.TempDir()
	cmd, addr := startProxyProcess(t, upstream.URL, state)
	if got := send(t, "PUT", addr+"/v/a", "999", "x"); got.status != 201 {
		t.Fatalf("%d %s", got.status, got.body)
	}
	out, errs, code := runCLI(t, "", "fence", "marks", "--state", state)
	if lines := strings.Split(out, "\n"); code != 0 || len(lines) < 2 || strings.Join(strings.Fields(lines[1])[:4], " ") != "/v/a 999 999 -" {
		t.Fatalf("marks while the proxy runs: %d %q %q", code, out, errs)
	}
	if _, errs, code := runCLI(t, "", "fence", "reset", "--state", state, "--resource", "/v/a", "--to", "5"); code != exitNo || !strings.Contains(errs, "stop the fence-proxy") {
		t.Fatalf("reset while the proxy runs: exit %d %q", code, errs)
	}
	cmd.Process.Kill()
	cmd.Wait()
	if _, errs, code := runCLI(t, "", "fence", "reset", "--state", state, "--resource", "/v/a", "--to", "5"); code != 0 {
		t.Fatalf("reset after the proxy stopped: exit %d %q", code, errs)
	}
}

// TestFenceStateThatIsNoFence (issue 44): a --state that is missing, a
// file, or a directory holding no fence is bad input, said in one line
// that names the path and what is wrong with it (exit 2), and reset
// leaves nothing behind in it. Before, marks and reset printed a bare
// "stat DIR: no such file or directory" (exit 1), marks listed an empty
// directory as a fence without marks, and reset made a fence in it.
func TestFenceStateThatIsNoFence(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "nope")
	file := filepath.Join(dir, "a-file")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ state, want string }{
		{missing, "--state " + missing + ": no such directory"},
		{file, "--state " + file + " is a file, not a fence's directory"},
		{empty, "--state " + empty + " holds no fence (no marks, no marks.log)"},
	} {
		for _, args := range [][]string{
			{"fence", "marks", "--state", tc.state},
			{"fence", "reset", "--state", tc.state, "--resource", "r", "--to", "1"},
		} {
			out, errs, code := runCLI(t, "", args...)
			if code != exitUsage || !strings.Contains(errs, tc.want) || !strings.Contains(errs, "fence-proxy") || out != "" {
				t.Errorf("%q: exit %d, stdout %q, stderr %q; want 2 and %q with what to give", args, code, out, errs, tc.want)
			}
		}
	}
	if left, err := os.ReadDir(empty); err != nil || len(left) != 0 {
		t.Errorf("the empty directory after the refusals: %v %v; want it left empty", left, err)
	}
}
