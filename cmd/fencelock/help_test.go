package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestHelpTopics: every topic has its text and every text its topic; no
// topic is named like a command, 'help COMMAND' is 'COMMAND -h', the list
// names the topics, and an unknown name is one line, a hint and exit 2.
func TestHelpTopics(t *testing.T) {
	files, err := topicFiles.ReadDir("help")
	if err != nil {
		t.Fatal(err)
	}
	var fileNames []string
	for _, f := range files {
		fileNames = append(fileNames, strings.TrimSuffix(f.Name(), ".txt"))
	}
	slices.Sort(fileNames)
	names := slices.Sorted(slices.Values(topicNames()))
	if !slices.Equal(fileNames, names) {
		t.Errorf("help/*.txt %v, topics %v: want one file per topic", fileNames, names)
	}
	list := helpOf(context.Background())
	for _, tp := range topics {
		if _, err := lookup(tp.name); err == nil {
			t.Errorf("topic %q is also a command: 'help %s' could not be both", tp.name, tp.name)
		}
		text := helpOf(context.Background(), tp.name)
		if text == "" || text != topicText(tp.name) {
			t.Errorf("help %s printed %q", tp.name, text)
		}
		for i, line := range strings.Split(text, "\n") {
			if len([]rune(line)) > 80 && !strings.HasPrefix(line, "  ") {
				t.Errorf("help %s line %d is %d columns: %q", tp.name, i+1, len(line), line)
			}
		}
		if !strings.Contains(list, "  "+tp.name+" ") {
			t.Errorf("'fencelock help' does not list topic %q", tp.name)
		}
	}
	for _, c := range commands {
		if c.summary == "" {
			continue
		}
		var out bytes.Buffer
		e := &env{stdin: strings.NewReader(""), stdout: &out, stderr: io.Discard, getenv: func(string) string { return "" }}
		if err := run(context.Background(), e, []string{c.name, "-h"}); err != nil {
			t.Fatalf("%s -h: %v", c.name, err)
		}
		if got := helpOf(context.Background(), c.name); got != out.String() {
			t.Errorf("'help %s' differs from '%s -h'", c.name, c.name)
		}
	}
	code, out, errs := runClientCLI(t, nil, "help", "tokenz")
	if code != exitUsage || out != "" ||
		errs != "fencelock: help: unknown command \"tokenz\"; did you mean the topic \"tokens\"?\nRun 'fencelock help' for the commands and topics.\n" {
		t.Errorf("help tokenz: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if code, _, _ := runClientCLI(t, nil, "help", "--man", "lock"); code != exitUsage {
		t.Errorf("help --man lock: exit %d, want 2", code)
	}
}

// probedFlags runs every command and subcommand with a probe and returns
// the flags they declare and the variables those flags read.
func probedFlags(t *testing.T) (flagNames, envVars map[string]bool) {
	t.Helper()
	flagNames, envVars = map[string]bool{}, map[string]bool{}
	for _, c := range commands {
		variants := [][]string{nil}
		for _, sub := range subcommandsOf(c.name) {
			variants = append(variants, strings.Fields(sub))
		}
		for _, args := range variants {
			e := &env{stdin: strings.NewReader(""), stdout: io.Discard, stderr: io.Discard,
				getenv: func(string) string { return "" },
				probe: func(f *flags) {
					for _, n := range f.order {
						flagNames[n] = true
					}
					for _, v := range f.env {
						envVars[v] = true
					}
				}}
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			_ = c.run(ctx, e, args)
		}
	}
	return flagNames, envVars
}

// TestHelpTopicFacts: what the topics name exists. Every --flag is a flag
// of some command, every 'fencelock WORD' a command, every FENCELOCK_*
// variable one this package reads or sets, and the env topic names every
// variable a flag reads.
func TestHelpTopicFacts(t *testing.T) {
	flagNames, envVars := probedFlags(t)
	if !flagNames["wait"] || !envVars["FENCELOCK_ADDR"] {
		t.Fatalf("the probe found too little: %v %v", flagNames, envVars)
	}
	// Variables read other than through a flag, or set for CMD: each is
	// a string literal in the package's code.
	var code strings.Builder
	srcs, _ := filepath.Glob("*.go")
	for _, src := range srcs {
		if strings.HasSuffix(src, "_test.go") {
			continue
		}
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		code.Write(b)
	}
	flagRe := regexp.MustCompile(`(?:^|[\s(/'"])--([a-z][a-z-]*[a-z])`)
	envRe := regexp.MustCompile(`FENCELOCK_[A-Z_]*[A-Z]`)
	cmdRe := regexp.MustCompile(`\bfencelock ([a-z][a-z-]*)`)
	for _, tp := range topics {
		text := topicText(tp.name)
		for _, m := range flagRe.FindAllStringSubmatch(text, -1) {
			if !flagNames[m[1]] {
				t.Errorf("help %s names --%s, which no command has", tp.name, m[1])
			}
		}
		for _, v := range envRe.FindAllString(text, -1) {
			if !envVars[v] && !strings.Contains(code.String(), `"`+v) {
				t.Errorf("help %s names %s, which fencelock neither reads nor sets", tp.name, v)
			}
		}
		for _, m := range cmdRe.FindAllStringSubmatch(text, -1) {
			if _, err := lookup(m[1]); err != nil {
				t.Errorf("help %s names 'fencelock %s', which is no command", tp.name, m[1])
			}
		}
	}
	envText := topicText("env")
	for v := range envVars {
		if !strings.Contains(envText, v) {
			t.Errorf("help env does not name %s", v)
		}
	}
	for _, v := range []string{"FENCELOCK_KEY=", "FENCELOCK_TOKEN=", "FENCELOCK_HOLDER="} {
		if !strings.Contains(code.String(), `"`+v) {
			t.Errorf("lock no longer sets %s for CMD; fix help env and safe-stop", v)
		}
	}
}

// TestManPageCommitted: docs/fencelock.1 is what 'fencelock help --man'
// prints now, and troff reads it without a warning. It asks the built
// binary: in this process the default addresses are the tripwire's.
func TestManPageCommitted(t *testing.T) {
	out, err := exec.Command(fencelockBinary(t), "help", "--man").Output()
	if err != nil {
		t.Fatal(err)
	}
	page := string(out)
	for _, want := range append([]string{".TH FENCELOCK 1", ".SS fencelock lock\n", ".SS fencelock cluster\n"}, topicNames()...) {
		if !strings.Contains(page, strings.ReplaceAll(want, "-", `\-`)) {
			t.Errorf("the page lacks %q", want)
		}
	}
	committed, err := os.ReadFile("../../docs/fencelock.1")
	if err != nil {
		t.Fatal(err)
	}
	if string(committed) != page {
		t.Error("docs/fencelock.1 is stale: run 'go run ./cmd/fencelock help --man > docs/fencelock.1'")
	}
	groff, err := exec.LookPath("groff")
	if err != nil {
		t.Skip("no groff to read the page")
	}
	cmd := exec.Command(groff, "-man", "-Tutf8", "-ww", "-z")
	cmd.Stdin = strings.NewReader(page)
	if msg, err := cmd.CombinedOutput(); err != nil || len(msg) > 0 {
		t.Errorf("groff: %v\n%s", err, msg)
	}
}
