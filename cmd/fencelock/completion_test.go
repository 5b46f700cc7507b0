package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func completionScript(t *testing.T, shell string) string {
	t.Helper()
	var out, errb bytes.Buffer
	e := &env{stdin: strings.NewReader(""), stdout: &out, stderr: &errb, getenv: func(string) string { return "" }}
	if err := run(context.Background(), e, []string{"completion", shell}); err != nil {
		t.Fatalf("completion %s: %v (%s)", shell, err, errb.String())
	}
	return out.String()
}

// TestCompletionBash: the bash script parses, names every listed command,
// and completes commands, a command's flags and subcommands when bash runs
// it.
func TestCompletionBash(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	script := completionScript(t, "bash")
	path := filepath.Join(t.TempDir(), "fencelock.bash")
	if err := os.WriteFile(path, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bash, "-n", path).CombinedOutput(); err != nil {
		t.Fatalf("bash -n: %v\n%s", err, out)
	}
	for _, c := range commands {
		if c.summary != "" && !strings.Contains(script, " "+c.name+" ") && !strings.Contains(script, "\""+c.name+" ") {
			t.Errorf("the script does not name %q", c.name)
		}
	}
	complete := func(words ...string) string {
		t.Helper()
		prog := `source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(( $# - 1 )); _fencelock; echo "${COMPREPLY[*]}"`
		out, err := exec.Command(bash, append([]string{"-c", prog, "bash", path}, words...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("completing %q: %v\n%s", words, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if got := complete("fencelock", "acq"); got != "acquire" {
		t.Errorf("fencelock acq<TAB> = %q, want acquire", got)
	}
	if got := complete("fencelock", "acquire", "--ho"); got != "--holder" {
		t.Errorf("fencelock acquire --ho<TAB> = %q, want --holder", got)
	}
	if got := complete("fencelock", "server", "--max-waiters"); got != "--max-waiters-per-key --max-waiters --max-waiters-per-principal --max-waiters-per-key-per-principal" {
		t.Errorf("fencelock server --max-waiters<TAB> = %q", got)
	}
	if got := complete("fencelock", "cluster", "j"); got != "join" {
		t.Errorf("fencelock cluster j<TAB> = %q, want join", got)
	}
	// Every level of every subcommand group, flags between words left out.
	for _, c := range []struct {
		words []string
		want  string
	}{
		{[]string{"fencelock", "session", ""}, "open extend close"},
		{[]string{"fencelock", "session", "--holder", "x", "o"}, "open"},
		{[]string{"fencelock", "acl", ""}, "bootstrap whoami token policy"},
		{[]string{"fencelock", "acl", "token", ""}, "create list delete"},
		{[]string{"fencelock", "acl", "policy", "s"}, "set"},
		{[]string{"fencelock", "lab", "r"}, "replay"},
		{[]string{"fencelock", "cluster", ""}, "members join remove secret"},
		{[]string{"fencelock", "fence", ""}, "marks reset"},
		{[]string{"fencelock", "fence", "r"}, "reset"},
	} {
		if got := complete(c.words...); got != c.want {
			t.Errorf("%s<TAB> = %q, want %q", strings.Join(c.words, " "), got, c.want)
		}
	}
	if got := complete("fencelock", "help", "fence-"); got != "fence-proxy" {
		t.Errorf("fencelock help fence-<TAB> = %q, want fence-proxy", got)
	}
	if got := complete("fencelock", "help", "saf"); got != "safe-stop" {
		t.Errorf("fencelock help saf<TAB> = %q, want the topic safe-stop", got)
	}
}

// TestCompletionZsh: the zsh script names every command and parses where
// zsh is installed.
func TestCompletionZsh(t *testing.T) {
	script := completionScript(t, "zsh")
	if !strings.HasPrefix(script, "#compdef fencelock\n") {
		t.Errorf("zsh script does not start with #compdef:\n%s", script)
	}
	for _, c := range commands {
		if c.summary != "" && !strings.Contains(script, "'"+c.name+":") {
			t.Errorf("the zsh script does not name %q", c.name)
		}
	}
	for _, tp := range topics {
		if !strings.Contains(script, "'"+tp.name+":") {
			t.Errorf("the zsh script does not name the topic %q", tp.name)
		}
	}
	zsh, err := exec.LookPath("zsh")
	if err != nil {
		t.Skip("no zsh to parse the script")
	}
	path := filepath.Join(t.TempDir(), "_fencelock")
	if err := os.WriteFile(path, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(zsh, "-n", path).CombinedOutput(); err != nil {
		t.Fatalf("zsh -n: %v\n%s", err, out)
	}
	// Run the function outside the completion system: compadd, _describe
	// and _files print what they were given, words and CURRENT are set as
	// the completion system sets them.
	complete := func(words ...string) string {
		t.Helper()
		prog := `compadd() { [[ $1 == -- ]] && shift; print -r -- "$*" }
_describe() { print -r -- "describe $1" }
_files() { print -r -- files }
compdef() { :; }
source "$1"; shift
words=("$@"); CURRENT=$#; PREFIX=${words[CURRENT]}
_fencelock`
		out, err := exec.Command(zsh, append([]string{"-fc", prog, "zsh", path}, words...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("completing %q: %v\n%s", words, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	for _, c := range []struct {
		words []string
		want  string
	}{
		{[]string{"fencelock", ""}, "describe command"},
		{[]string{"fencelock", "session", ""}, "open extend close"},
		{[]string{"fencelock", "acl", "token", ""}, "create list delete"},
		{[]string{"fencelock", "acl", "--json", "policy", ""}, "set list delete"},
		{[]string{"fencelock", "session", "--holder", "x", "--json", ""}, "open extend close"},
		{[]string{"fencelock", "lab", ""}, "replay"},
		{[]string{"fencelock", "cluster", ""}, "members join remove secret"},
		{[]string{"fencelock", "completion", ""}, "bash zsh"},
		{[]string{"fencelock", "check", "--ad"}, "--addr"},
		{[]string{"fencelock", "get", ""}, "files"},
	} {
		got := complete(c.words...)
		if c.want == "--addr" {
			// compadd gets every flag; zsh itself would filter by PREFIX.
			if !strings.Contains(" "+got+" ", " --addr ") {
				t.Errorf("%s<TAB> = %q, want it to offer --addr", strings.Join(c.words, " "), got)
			}
			continue
		}
		if got != c.want {
			t.Errorf("%s<TAB> = %q, want %q", strings.Join(c.words, " "), got, c.want)
		}
	}
}

func TestCompletionUnknownShell(t *testing.T) {
	var out, errb bytes.Buffer
	e := &env{stdin: strings.NewReader(""), stdout: &out, stderr: &errb, getenv: func(string) string { return "" }}
	if err := run(context.Background(), e, []string{"completion", "fish"}); err == nil {
		t.Fatal("completion fish succeeded")
	}
}

// TestUsageDeployEnvNamesServerVariables: deploy/fencelock.env shows every
// FENCELOCK_* variable 'fencelock server -h' says it reads.
func TestUsageDeployEnvNamesServerVariables(t *testing.T) {
	var out bytes.Buffer
	e := &env{stdin: strings.NewReader(""), stdout: &out, stderr: &out, getenv: func(string) string { return "" }}
	if err := run(context.Background(), e, []string{"server", "-h"}); err != nil {
		t.Fatal(err)
	}
	sample, err := os.ReadFile("../../deploy/fencelock.env")
	if err != nil {
		t.Fatal(err)
	}
	vars := regexp.MustCompile(`FENCELOCK_[A-Z_]+[A-Z]`).FindAllString(out.String(), -1)
	if len(vars) == 0 {
		t.Fatal("server -h names no variable")
	}
	for _, v := range vars {
		if !regexp.MustCompile(`(?m)^#?` + v + `=`).Match(sample) {
			t.Errorf("deploy/fencelock.env lacks %s=", v)
		}
	}
}
