package main

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// TestReadmeOutputsIgnored: what the README's walkthroughs build into the
// checkout (go build -o NAME) and the data dirs its servers write (--data
// DIR) are in .gitignore, so following them leaves git status clean.
func TestReadmeOutputsIgnored(t *testing.T) {
	git, err := exec.LookPath("git")
	if err != nil {
		t.Skip("no git")
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, m := range regexp.MustCompile(`go build -o ([\w./-]+)`).FindAllStringSubmatch(string(readme), -1) {
		paths = append(paths, m[1])
	}
	for _, m := range regexp.MustCompile(`--data ([a-z0-9.][\w./-]*)`).FindAllStringSubmatch(string(readme), -1) {
		paths = append(paths, strings.TrimSuffix(m[1], "/")+"/")
	}
	for _, m := range regexp.MustCompile(`cluster secret > ([\w./-]+)`).FindAllStringSubmatch(string(readme), -1) {
		paths = append(paths, m[1])
	}
	if len(paths) < 3 {
		t.Fatalf("found only %q in the README: has its walkthrough changed?", paths)
	}
	for _, p := range paths {
		cmd := exec.Command(git, "check-ignore", "-q", "--no-index", p)
		cmd.Dir = "../.."
		if err := cmd.Run(); err != nil {
			t.Errorf("%s (from the README) is not in .gitignore: %v", p, err)
		}
	}
}
