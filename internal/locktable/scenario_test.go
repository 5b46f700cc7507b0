package locktable_test

// The lock table's scenarios live in testdata/*.txt, one fresh table per
// file, in the style of etcd-io/raft's interaction tests. A file is a list
// of blocks; a block is one or more calls in the replay language (see
// package internal/replay: acquire, release, valid, check, extend, wait,
// cancel, tick, get, list, waiters, next, len, shared, holders), a line "----", and the
// expected output, which ends at a blank line or the end of the file:
//
//	# comments and blank lines between blocks are kept as they are
//	wait k a 0 10
//	wait k b 1 4
//	----
//	1
//	event granted k a 1 since=0 expiry=10
//	queued
//
// Each call prints its answer on one line, then one "event ..." line per
// event the table reported during that call (replay.FormatEvent). A call
// the table rejects prints "error: " and the message. Comment lines among
// the calls print nothing.
//
// After a deliberate change of behaviour, rewrite the expected output with
//
//	go test ./internal/locktable/ -run TestScenarios -update
//
// and read the diff before committing it.

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fencelock/fencelock/internal/replay"
)

var update = flag.Bool("update", false, "rewrite testdata/*.txt with the output the calls give now")

func TestScenarios(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no testdata/*.txt")
	}
	for _, name := range files {
		t.Run(strings.TrimSuffix(filepath.Base(name), ".txt"), func(t *testing.T) {
			data, err := os.ReadFile(name)
			if err != nil {
				t.Fatal(err)
			}
			got, failures, err := runScenario(string(data))
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if *update {
				if got != string(data) {
					if err := os.WriteFile(name, []byte(got), 0o644); err != nil {
						t.Fatal(err)
					}
				}
				return
			}
			for _, f := range failures {
				t.Errorf("%s:%s", name, f)
			}
		})
	}
}

// block is one group of calls and the output expected of them.
type block struct {
	before []string // comment and blank lines above the calls
	calls  []string
	want   []string
	line   int // of the first call
}

// parseScenario splits a file into blocks and the lines after the last.
func parseScenario(text string) (blocks []block, tail []string, err error) {
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	var b block
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		trimmed := strings.TrimSpace(l)
		switch {
		case l == "----":
			if len(b.calls) == 0 {
				return nil, nil, fmt.Errorf("line %d: ---- without calls above it", i+1)
			}
			for i+1 < len(lines) && strings.TrimSpace(lines[i+1]) != "" {
				i++
				b.want = append(b.want, lines[i])
			}
			blocks = append(blocks, b)
			b = block{}
		case len(b.calls) == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "#")):
			b.before = append(b.before, l)
		default:
			if len(b.calls) == 0 {
				b.line = i + 1
			}
			b.calls = append(b.calls, l)
		}
	}
	if len(b.calls) > 0 {
		return nil, nil, fmt.Errorf("line %d: calls without a ---- line after them", b.line)
	}
	return blocks, b.before, nil
}

// runScenario runs every block of text against one table. It returns the
// file as it would be with the output the calls give now, and one message
// per block whose output differs from the one written down.
func runScenario(text string) (rewritten string, failures []string, err error) {
	blocks, tail, err := parseScenario(text)
	if err != nil {
		return "", nil, err
	}
	s := replay.NewSession(true)
	var out strings.Builder
	for _, b := range blocks {
		var got []string
		for _, call := range b.calls {
			answer, err := s.Exec(call)
			switch {
			case err == replay.ErrSkip:
				continue
			case err != nil:
				answer = "error: " + err.Error()
			}
			got = append(got, strings.Split(answer, "\n")...)
		}
		if g, w := strings.Join(got, "\n"), strings.Join(b.want, "\n"); g != w {
			failures = append(failures, fmt.Sprintf("%d: output differs\n%s\n----\ngot:\n%s\nwant:\n%s", b.line, strings.Join(b.calls, "\n"), g, w))
		}
		for _, l := range b.before {
			out.WriteString(l + "\n")
		}
		for _, l := range b.calls {
			out.WriteString(l + "\n")
		}
		out.WriteString("----\n")
		for _, l := range got {
			out.WriteString(l + "\n")
		}
	}
	for _, l := range tail {
		out.WriteString(l + "\n")
	}
	return out.String(), failures, nil
}
