package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"runtime/debug"
	"slices"
	"strings"
	"testing"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/client/clienttest"
)

// invocations is every command and subcommand as typed after fencelock:
// the table's, and the ones a command dispatches itself.
func invocations() [][]string {
	var out [][]string
	for _, c := range commands {
		out = append(out, []string{c.name})
	}
	out = append(out, []string{"lab", "replay"}, []string{"cluster", "members"},
		[]string{"cluster", "join"}, []string{"cluster", "remove"})
	for _, sub := range aclSubcommands {
		out = append(out, append([]string{"acl"}, strings.Fields(sub)...))
	}
	return out
}

var flagLine = regexp.MustCompile(`(?m)^  (-{1,2})([a-z][a-z0-9-]*)(?: (\S+))?`)

// TestEveryCommandRefusesAnUnknownFlag: one line, a hint, exit 2, nothing
// on stdout; whatever the command.
func TestEveryCommandRefusesAnUnknownFlag(t *testing.T) {
	for _, inv := range invocations() {
		name := strings.Join(inv, " ")
		t.Run(name, func(t *testing.T) {
			out, errs, code := runCLI(t, "", append(slices.Clone(inv), "--bogus")...)
			if code != exitUsage {
				t.Errorf("exit %d, want %d", code, exitUsage)
			}
			if out != "" {
				t.Errorf("stdout %q, want nothing", out)
			}
			lines := strings.Split(strings.TrimSuffix(errs, "\n"), "\n")
			if len(lines) > 3 || len(lines) < 2 {
				t.Errorf("stderr has %d lines, want a message and a hint:\n%s", len(lines), errs)
			}
			if c, _ := lookup(inv[0]); c.summary == "" {
				return // moved elsewhere: the message says where, not -h
			}
			if !strings.Contains(lines[0], "--bogus") {
				t.Errorf("the message does not name --bogus: %q", lines[0])
			}
			if hint := lines[len(lines)-1]; !strings.Contains(hint, "fencelock "+name+" -h") {
				t.Errorf("the hint %q does not point at 'fencelock %s -h'", hint, name)
			}
		})
	}
}

// TestEveryCommandHelp: -h, --help and 'help CMD' print the same usage on
// stdout and exit 0; each flag is listed once, as --flag.
func TestEveryCommandHelp(t *testing.T) {
	for _, inv := range invocations() {
		name := strings.Join(inv, " ")
		if c, _ := lookup(inv[0]); c.summary == "" {
			continue // moved elsewhere: every use is the same usage error
		}
		t.Run(name, func(t *testing.T) {
			out, errs, code := runCLI(t, "", append(slices.Clone(inv), "-h")...)
			if code != 0 || errs != "" {
				t.Fatalf("exit %d, stderr %q; want 0 and nothing", code, errs)
			}
			if !strings.HasPrefix(out, "Usage: fencelock "+name) {
				t.Errorf("help does not start with its usage line:\n%s", out)
			}
			if c, _ := lookup(inv[0]); len(inv) == 1 && !strings.HasPrefix(out, strings.TrimRight(c.usage, "\n")) {
				t.Errorf("help does not start with the table's usage text")
			}
			seen := map[string]bool{}
			for _, m := range flagLine.FindAllStringSubmatch(out, -1) {
				if m[1] != "--" {
					t.Errorf("flag %s%s is not shown as --%s", m[1], m[2], m[2])
				}
				if seen[m[2]] {
					t.Errorf("flag --%s is listed twice", m[2])
				}
				seen[m[2]] = true
				if regexp.MustCompile(`(^|[\s(])-` + m[2] + `\b`).MatchString(out) {
					t.Errorf("help also shows -%s", m[2])
				}
			}
			if strings.Contains(out, "issue ") {
				t.Errorf("help names a tracker issue:\n%s", out)
			}
			for _, alt := range [][]string{append(slices.Clone(inv), "--help"), append([]string{"help"}, inv...)} {
				if inv[0] == "help" && len(alt) > 1 && alt[0] == "help" {
					continue // 'help help' is help's own help; covered by help -h
				}
				o2, e2, c2 := runCLI(t, "", alt...)
				if c2 != 0 || o2 != out || e2 != "" {
					t.Errorf("%v: exit %d, stderr %q, same output %v", alt, c2, e2, o2 == out)
				}
			}
		})
	}
}

// TestDurationFlagsNeedAUnit: every flag whose value is a duration refuses
// a bare number, in every command, before anything is sent or started.
func TestDurationFlagsNeedAUnit(t *testing.T) {
	n := 0
	for _, inv := range invocations() {
		help, _, _ := runCLI(t, "", append(slices.Clone(inv), "-h")...)
		for _, m := range flagLine.FindAllStringSubmatch(help, -1) {
			if m[3] != "D" && m[3] != "LIST" {
				continue
			}
			n++
			args := append(slices.Clone(inv), "--"+m[2], "5")
			if inv[0] == "lock" {
				args = append(args, "k", "--", "true")
			}
			_, errs, code := runCLI(t, "", args...)
			if code != exitUsage || !(strings.Contains(errs, "needs a unit") || strings.Contains(errs, "is not a duration")) {
				t.Errorf("%v: exit %d, stderr %q; want a usage error about the unit", args, code, errs)
			}
		}
	}
	if n < 10 {
		t.Errorf("only %d duration flags found in the help texts", n)
	}
	for _, ok := range []string{"0", "250ms", "1h30m"} {
		if _, err := parseDuration(ok); err != nil {
			t.Errorf("parseDuration(%q): %v", ok, err)
		}
	}
}

func TestUnknownCommandSuggests(t *testing.T) {
	for _, tc := range []struct{ typed, want string }{
		{"aquire", `unknown command "aquire"; did you mean "acquire"?`},
		{"relaese", `did you mean "release"?`},
		{"lsit", `did you mean "list"?`},
		{"versoin", `did you mean "version"?`},
		{"frobnicate", `unknown command "frobnicate"` + "\n"},
	} {
		for _, args := range [][]string{{tc.typed}, {"help", tc.typed}} {
			out, errs, code := runCLI(t, "", args...)
			if code != exitUsage || out != "" || !strings.Contains(errs, tc.want) || strings.Count(errs, "\n") != 2 {
				t.Errorf("%v: exit %d, stdout %q, stderr %q; want 2 and %q", args, code, out, errs, tc.want)
			}
		}
	}
	// A mistyped flag gets a suggestion too.
	_, errs, _ := runCLI(t, "", "acquire", "k", "--hodler", "h")
	if !strings.Contains(errs, "Did you mean --holder?") {
		t.Errorf("acquire --hodler: stderr %q", errs)
	}
	// A short spelling suggests the flags it begins, never another short
	// flag one edit away (-t is not a typo of --n).
	for _, tc := range []struct {
		args []string
		want string // "" for no suggestion
	}{
		{[]string{"acquire", "k", "-t", "5s"}, "Did you mean --ttl, --try or --timeout?"},
		{[]string{"list", "-l", "3"}, "Did you mean --limit?"},
		{[]string{"acquire", "k", "-q", "5s"}, ""},
	} {
		_, errs, _ := runCLI(t, "", tc.args...)
		if tc.want == "" {
			if strings.Contains(errs, "Did you mean") {
				t.Errorf("%v: stderr %q, want no suggestion", tc.args, errs)
			}
			continue
		}
		if !strings.Contains(errs, tc.want) || strings.Contains(errs, "--n?") {
			t.Errorf("%v: stderr %q, want %q", tc.args, errs, tc.want)
		}
	}
}

func TestHelpListsEveryCommand(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"--help"}, {"-h"}} {
		out, errs, code := runCLI(t, "", args...)
		if code != 0 || errs != "" {
			t.Fatalf("%v: exit %d, stderr %q", args, code, errs)
		}
		for _, c := range commands {
			if c.summary == "" {
				continue
			}
			if !regexp.MustCompile(`(?m)^  ` + c.name + ` +` + regexp.QuoteMeta(c.summary) + `$`).MatchString(out) {
				t.Errorf("%v does not list %s with its summary", args, c.name)
			}
		}
	}
	// Bare 'fencelock' shows the same list, and exits 2 as before.
	out, _, code := runCLI(t, "")
	if code != exitUsage || !strings.Contains(out, "Commands:") {
		t.Errorf("bare fencelock: exit %d, stdout %q", code, out)
	}
}

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"version"}, {"-version"}} {
		out, errs, code := runCLI(t, "", args...)
		if code != 0 || errs != "" || !regexp.MustCompile(`^fencelock \S+ .*go1\.`).MatchString(out) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, out, errs)
		}
	}
	out, _, code := runCLI(t, "", "version", "--json")
	var v buildVersion
	if err := json.Unmarshal([]byte(out), &v); err != nil || code != 0 || v.Version == "" || v.Go == "" {
		t.Errorf("version --json: exit %d, %q: %v", code, out, err)
	}
	for _, tc := range []struct {
		bi   *debug.BuildInfo
		want string
	}{
		{nil, "fencelock (devel) go"},
		{&debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "8a560b8"}, {Key: "vcs.time", Value: "2026-12-01T10:57:17Z"}, {Key: "vcs.modified", Value: "true"},
		}}, "fencelock (devel) commit 8a560b8 (modified) of 2026-12-01T10:57:17Z go"},
		{&debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}}, "fencelock v1.2.3 go"},
	} {
		if got := versionOf(tc.bi).String(); !strings.HasPrefix(got, tc.want) {
			t.Errorf("versionOf = %q, want it to start %q", got, tc.want)
		}
	}
}

// TestJSONOutputs: every client command's --json is the API's type.
func TestJSONOutputs(t *testing.T) {
	srv := clienttest.NewServer(client.SystemClock{})
	defer srv.Close()
	envs := map[string]string{"FENCELOCK_ADDR": srv.Addr}
	decode := func(args []string, wantCode int, v any) {
		t.Helper()
		code, out, errs := runClientCLI(t, envs, args...)
		if code != wantCode {
			t.Fatalf("%v: exit %d, stderr %q", args, code, errs)
		}
		dec := json.NewDecoder(strings.NewReader(out))
		dec.DisallowUnknownFields()
		if err := dec.Decode(v); err != nil {
			t.Fatalf("%v: %q is not a %T: %v", args, out, v, err)
		}
	}
	var l api.Lease
	decode([]string{"acquire", "j/a", "--holder", "alice", "--ttl", "30s", "--json"}, 0, &l)
	if l.Key != "j/a" || l.Holder != "alice" || l.Token == 0 || l.TTLMs != 30000 {
		t.Errorf("acquire --json: %+v", l)
	}
	var ext api.Lease
	decode([]string{"extend", "j/a", fmt.Sprint(l.Token), "--holder", "alice", "--ttl", "1m", "--json"}, 0, &ext)
	if ext.Token != l.Token || ext.TTLMs != 60000 {
		t.Errorf("extend --json: %+v", ext)
	}
	var got api.Lease
	decode([]string{"get", "j/a", "--json"}, 0, &got)
	if got.Holder != "alice" {
		t.Errorf("get --json: %+v", got)
	}
	var list api.ListResponse
	decode([]string{"list", "j/", "--json"}, 0, &list)
	if len(list.Locks) != 1 || list.Locks[0].Key != "j/a" {
		t.Errorf("list --json: %+v", list)
	}
	var chk api.CheckResponse
	decode([]string{"check", "j/a", fmt.Sprint(l.Token), "--json"}, 0, &chk)
	if !chk.Valid || chk.Token != l.Token {
		t.Errorf("check --json: %+v", chk)
	}
	var rel releaseAnswer
	decode([]string{"release", "j/a", "--holder", "alice", "--json"}, 0, &rel)
	if !rel.Released || rel.Key != "j/a" {
		t.Errorf("release --json: %+v", rel)
	}
	var m api.MembersResponse
	decode([]string{"cluster", "members", "--json"}, 0, &m)
	if len(m.Members) == 0 || m.Node == "" {
		t.Errorf("cluster members --json: %+v", m)
	}
	var b benchAnswer
	decode([]string{"bench", "--http", "--clients", "2", "--duration", "200ms", "--json"}, 0, &b)
	if b.Cycles == 0 || b.Clients != 2 || b.DurationMs != 200 || b.PerSecond <= 0 {
		t.Errorf("bench --json: %+v", b)
	}
	var rec recoverAnswer
	decode([]string{"recover", "--data", t.TempDir(), "--min-token", "5", "--json"}, 0, &rec)
	if len(rec.Did) == 0 || !strings.Contains(strings.Join(rec.Did, "\n"), "token floor 5") {
		t.Errorf("recover --json: %+v", rec)
	}
}

// TestRangeErrorsInCLITerms: a refused value is named as the user typed
// it, whether the CLI or the server refused it.
func TestRangeErrorsInCLITerms(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"acquire", "k", "--holder", "h", "--ttl", "50ms"}, "fencelock: acquire: --ttl must be between 100ms and 24h\n"},
		{[]string{"acquire", "k", "--holder", "h", "--ttl", "25h"}, "--ttl must be between 100ms and 24h"},
		{[]string{"acquire", "k", "--holder", "h", "--try", "--wait", "5s"}, "--try and --wait 5s: --try tries once"},
		{[]string{"extend", "k", "1", "--holder", "h", "--ttl", "50ms"}, "fencelock: extend: --ttl must be between 100ms and 24h\n"},
		{[]string{"lock", "k", "--ttl", "50ms", "--", "true"}, "fencelock: lock: --ttl must be between 100ms and 24h\n"},
		{[]string{"list", "--limit", "-1"}, "--limit must not be negative"},
	} {
		_, errs, code := runCLI(t, "", tc.args...)
		if code != exitUsage || !strings.Contains(errs, tc.want) || strings.Contains(errs, "_ms") {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, code, errs, tc.want)
		}
	}
	// The server's refusals, as the client reports them.
	for _, tc := range []struct {
		cmd  string
		ae   client.APIError
		want string
	}{
		{"acquire k", client.APIError{Code: api.CodeInvalid, Field: "ttl_ms", Message: "ttl_ms must be between 100 and 86400000"}, "acquire: --ttl must be between 100ms and 24h"},
		{"acquire k", client.APIError{Code: api.CodeInvalid, Field: "wait_ms", Message: "wait_ms must be between 0 and 3600000"}, "acquire: --wait must be between 0s and 1h"},
		{"acquire k", client.APIError{Code: api.CodeInvalid, Field: "key", Message: "key is 2000 bytes; the limit is 1024"}, "acquire: KEY is 2000 bytes; the limit is 1024"},
		{"acquire k", client.APIError{Code: api.CodeInvalid, Field: "holder", Message: "holder is required"}, "acquire: --holder is required"},
		{"check k", client.APIError{Code: api.CodeInvalid, Field: "token", Message: "token must be an unsigned integer"}, "check: TOKEN must be an unsigned integer"},
		{"release k", client.APIError{Code: api.CodeInvalid, Field: "token", Message: "token must be an unsigned integer"}, "release: --token must be an unsigned integer"},
		{"list", client.APIError{Code: api.CodeInvalid, Field: "limit", Message: "limit must be an integer between 1 and 10000"}, "list: --limit must be between 1 and 10000"},
		{"get k", client.APIError{Code: api.CodeInvalid, Field: "mystery", Message: "mystery is odd"}, "get k: mystery is odd"},
	} {
		err := clientFail(tc.cmd, &tc.ae)
		var ue *usageErr
		if !errors.As(err, &ue) || !strings.HasPrefix(ue.Error(), tc.want) {
			t.Errorf("%s %+v: %v, want a usage error %q", tc.cmd, tc.ae, err, tc.want)
		}
	}
}

func TestEditDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"acquire", "acquire", 0}, {"aquire", "acquire", 1}, {"relaese", "release", 1},
		{"lsit", "list", 1}, {"get", "set", 1}, {"kitten", "sitting", 3},
	} {
		if got := editDistance(tc.a, tc.b); got != tc.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
	if s := suggest("frobnicate", []string{"acquire", "list"}); s != "" {
		t.Errorf("suggest(frobnicate) = %q", s)
	}
}

func TestVersionStamped(t *testing.T) {
	base := buildVersion{Version: "(devel)", Commit: "abc", Modified: true, Go: "go1.26"}
	if got := stamped(base, "", ""); got != base {
		t.Fatalf("no stamp changed %+v to %+v", base, got)
	}
	got := stamped(base, "v1.2.3", "def")
	want := buildVersion{Version: "v1.2.3", Commit: "def", Go: "go1.26"}
	if got != want {
		t.Fatalf("stamped = %+v, want %+v", got, want)
	}
}
