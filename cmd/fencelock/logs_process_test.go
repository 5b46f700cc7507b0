//go:build unix

package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// A healthy start and a healthy join log nothing above INFO, with raft's
// lines in the server's own format: one timestamp per line, raft at the
// level --log-level asks for (its INFO lines show at the default level).

var (
	timestampRE = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d`)
	textLineRE  = regexp.MustCompile(`^time=\S+ level=(\S+) msg=`)
)

// logLine is one parsed line of a server's stderr.
type logLine struct {
	level, msg, component string
}

// parseLogs parses stderr written with --log-format format, failing on a
// line that is not in that format or carries a second timestamp.
func parseLogs(t *testing.T, who, stderr, format string) []logLine {
	t.Helper()
	var out []logLine
	for _, line := range strings.Split(strings.TrimSpace(stderr), "\n") {
		if n := len(timestampRE.FindAllString(line, -1)); n != 1 {
			t.Errorf("%s: %d timestamps in %q, want 1", who, n, line)
		}
		switch format {
		case "json":
			if c := strings.Count(line, `"time":`); c != 1 {
				t.Errorf("%s: %d time fields in %s", who, c, line)
			}
			var m map[string]any
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				t.Errorf("%s: not a JSON object: %s: %v", who, line, err)
				continue
			}
			l := logLine{level: fmt.Sprint(m["level"]), msg: fmt.Sprint(m["msg"])}
			if c, ok := m["component"].(string); ok {
				l.component = c
			}
			out = append(out, l)
		default:
			m := textLineRE.FindStringSubmatch(line)
			if m == nil {
				t.Errorf("%s: not a text log line: %q", who, line)
				continue
			}
			l := logLine{level: m[1], msg: line}
			if strings.Contains(line, " component=raft") {
				l.component = "raft"
			}
			out = append(out, l)
		}
	}
	return out
}

// checkHealthy fails for every line above INFO and when raft logged no
// INFO line at all (raft would not be following --log-level).
func checkHealthy(t *testing.T, who, stderr, format string) {
	t.Helper()
	raftInfo := false
	for _, l := range parseLogs(t, who, stderr, format) {
		switch l.level {
		case "DEBUG", "INFO":
			raftInfo = raftInfo || (l.level == "INFO" && l.component == "raft")
		default:
			t.Errorf("%s: a %s line on the healthy path: %s", who, l.level, l.msg)
		}
	}
	if !raftInfo {
		t.Errorf("%s: no raft line at INFO: raft does not follow --log-level info", who)
	}
}

func TestLogsHealthySingleNodeStart(t *testing.T) {
	t.Parallel()
	for _, format := range []string{"text", "json"} {
		t.Run(format, func(t *testing.T) {
			dir := t.TempDir()
			addr := freeAddr(t)
			p := startProc(t, dir, nil, "--listen", addr, "--data", filepath.Join(dir, "data"), "--log-format", format)
			p.waitReady(addr)
			// The election is logged before the server hears it leads.
			poll(t, "became leader", func() bool { return strings.Contains(p.stderr.String(), "became leader") })
			checkHealthy(t, "single node", p.stderr.String(), format)
		})
	}
}

// At --log-level warn a healthy start says nothing, raft included.
func TestLogsHealthyStartAtWarnIsSilent(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	addr := freeAddr(t)
	p := startProc(t, dir, nil, "--listen", addr, "--data", filepath.Join(dir, "data"), "--log-level", "warn")
	p.waitReady(addr)
	if got := p.stderr.String(); got != "" {
		t.Fatalf("stderr at --log-level warn:\n%s", got)
	}
}

func TestServerLogFormatRefusesOthers(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args, env []string
		want      string
	}{
		{[]string{"--log-format", "xml"}, nil, `server: --log-format must be text or json, got "xml"`},
		{nil, []string{"FENCELOCK_LOG_FORMAT=logfmt"}, `server: FENCELOCK_LOG_FORMAT must be text or json, got "logfmt"`},
	} {
		p := startProc(t, t.TempDir(), c.env, c.args...)
		if code := p.exitCode(); code != 2 {
			t.Errorf("%v %v: exit %d, want 2", c.args, c.env, code)
		}
		if got := p.stderr.String(); !strings.Contains(got, c.want) || strings.Count(got, "\n") > 3 {
			t.Errorf("%v %v: stderr %q, want %q", c.args, c.env, got, c.want)
		}
	}
}

// TestLogsHealthyJoin stays serial: on a CPU shared with the parallel
// tests' clusters a follower can miss a heartbeat and log a warning, which
// here would count as an unhealthy join.
func TestLogsHealthyJoin(t *testing.T) {
	for _, format := range []string{"text", "json"} {
		t.Run(format, func(t *testing.T) {
			dir := t.TempDir()
			var nodes []*pnode
			for i := range 3 {
				nodes = append(nodes, &pnode{id: fmt.Sprintf("n%d", i+1), client: freeAddr(t), raft: freeAddr(t),
					data: filepath.Join(dir, fmt.Sprintf("n%d", i+1))})
			}
			start := func(n *pnode, extra ...string) {
				args := append([]string{"--id", n.id, "--listen", n.client, "--raft", n.raft, "--data", n.data, "--log-format", format}, extra...)
				n.p = startProc(t, t.TempDir(), nil, args...)
			}
			start(nodes[0])
			nodes[0].p.waitReady(nodes[0].client)
			for _, n := range nodes[1:] {
				start(n, "--join", nodes[0].client)
			}
			for _, n := range nodes[1:] { // /readyz answers on the leader only
				poll(t, n.id+" joined", func() bool { return strings.Contains(n.p.stderr.String(), "joined the cluster") })
			}
			poll(t, "both promoted", func() bool { return strings.Count(nodes[0].p.stderr.String(), "promoted to voter") == 2 })
			for _, n := range nodes {
				checkHealthy(t, n.id, n.p.stderr.String(), format)
			}
		})
	}
}
