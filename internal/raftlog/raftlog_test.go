package raftlog

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
)

// newJSON is a Logger over a JSON handler at level, and the lines it wrote.
func newJSON(level slog.Level) (*Logger, func() []map[string]any) {
	var buf bytes.Buffer
	l := New(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: level})))
	return l, func() []map[string]any {
		var out []map[string]any
		for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
			if line == "" {
				continue
			}
			var m map[string]any
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				panic(err)
			}
			out = append(out, m)
		}
		buf.Reset()
		return out
	}
}

func TestLevelsMap(t *testing.T) {
	l, lines := newJSON(LevelTrace)
	l.Trace("t")
	l.Debug("d")
	l.Info("i")
	l.Warn("w")
	l.Error("e")
	l.Log(hclog.NoLevel, "n")
	l.Log(hclog.Off, "off")
	want := []string{"DEBUG-4", "DEBUG", "INFO", "WARN", "ERROR", "INFO"}
	got := lines()
	if len(got) != len(want) {
		t.Fatalf("%d lines, want %d: %v", len(got), len(want), got)
	}
	for i, m := range got {
		if m["level"] != want[i] {
			t.Errorf("line %d (%v): level %v, want %s", i, m["msg"], m["level"], want[i])
		}
	}
}

func TestLevelChecksFollowTheHandler(t *testing.T) {
	for _, c := range []struct {
		level                          slog.Level
		trace, debug, info, warn, errr bool
		get                            hclog.Level
	}{
		{LevelTrace, true, true, true, true, true, hclog.Trace},
		{slog.LevelDebug, false, true, true, true, true, hclog.Debug},
		{slog.LevelInfo, false, false, true, true, true, hclog.Info},
		{slog.LevelWarn, false, false, false, true, true, hclog.Warn},
		{slog.LevelError, false, false, false, false, true, hclog.Error},
	} {
		l, lines := newJSON(c.level)
		got := []bool{l.IsTrace(), l.IsDebug(), l.IsInfo(), l.IsWarn(), l.IsError()}
		want := []bool{c.trace, c.debug, c.info, c.warn, c.errr}
		for i := range got {
			if got[i] != want[i] {
				t.Errorf("handler at %v: Is* %v, want %v", c.level, got, want)
				break
			}
		}
		if g := l.GetLevel(); g != c.get {
			t.Errorf("handler at %v: GetLevel %v, want %v", c.level, g, c.get)
		}
		l.Debug("d")
		l.Info("i")
		if n := len(lines()); (c.level <= slog.LevelDebug && n != 2) || (c.level == slog.LevelInfo && n != 1) || (c.level > slog.LevelInfo && n != 0) {
			t.Errorf("handler at %v wrote %d of a DEBUG and an INFO line", c.level, n)
		}
	}
}

func TestSetLevelIsSharedAndHandlerStillApplies(t *testing.T) {
	l, lines := newJSON(slog.LevelInfo)
	sub := l.Named("sub").With("k", "v")
	l.SetLevel(hclog.Error)
	sub.Warn("dropped")
	sub.Error("kept")
	if got := lines(); len(got) != 1 || got[0]["msg"] != "kept" {
		t.Fatalf("after SetLevel(Error) on the parent: %v", got)
	}
	l.SetLevel(hclog.Trace) // below the handler: the handler decides
	if sub.IsDebug() || !sub.IsInfo() {
		t.Fatal("SetLevel(Trace) must not enable what the handler drops")
	}
	l.SetLevel(hclog.NoLevel)
	if sub.GetLevel() != hclog.Info {
		t.Fatalf("GetLevel %v, want Info", sub.GetLevel())
	}
}

func TestArgsBecomeAttrs(t *testing.T) {
	l, lines := newJSON(slog.LevelInfo)
	type peer struct{ ID, Addr string }
	l.Info("hello", "n", 3, "peer", peer{"n2", "a:1"}, "error", errors.New("boom"),
		"f", hclog.Format{"%d-%s", 7, "x"}, "h", hclog.Hex(255), 42, "not-a-key", "odd")
	m := lines()[0]
	if m["msg"] != "hello" || m["n"] != float64(3) || m["error"] != "boom" || m["f"] != "7-x" || m["h"] != "0xff" ||
		m["42"] != "not-a-key" || m["EXTRA_VALUE_AT_END"] != "odd" {
		t.Fatalf("attrs: %v", m)
	}
	if p, _ := m["peer"].(map[string]any); p["ID"] != "n2" {
		t.Fatalf("struct value: %v", m["peer"])
	}
}

func TestWithNamedResetNamed(t *testing.T) {
	l, lines := newJSON(slog.LevelInfo)
	a := l.With("component", "raft")
	b := a.Named("snapshot").With("id", "s1")
	c := b.Named("persist")
	d := c.ResetNamed("wal")
	a.Info("a")
	b.Info("b")
	c.Info("c")
	d.Info("d")
	l.Info("root")
	got := lines()
	check := func(i int, name string, attrs map[string]string) {
		t.Helper()
		m := got[i]
		if name == "" {
			if _, ok := m["logger"]; ok {
				t.Errorf("%v: has a logger name", m["msg"])
			}
		} else if m["logger"] != name {
			t.Errorf("%v: logger %v, want %s", m["msg"], m["logger"], name)
		}
		for k, v := range attrs {
			if m[k] != v {
				t.Errorf("%v: %s=%v, want %s", m["msg"], k, m[k], v)
			}
		}
	}
	check(0, "", map[string]string{"component": "raft"})
	check(1, "snapshot", map[string]string{"component": "raft", "id": "s1"})
	check(2, "snapshot.persist", map[string]string{"component": "raft", "id": "s1"})
	check(3, "wal", map[string]string{"component": "raft", "id": "s1"})
	if _, ok := got[4]["component"]; ok {
		t.Error("With changed its parent")
	}
	if d.Name() != "wal" || c.Name() != "snapshot.persist" || l.Name() != "" {
		t.Errorf("names %q %q %q", d.Name(), c.Name(), l.Name())
	}
	if ia := b.ImpliedArgs(); len(ia) != 4 || ia[0] != "component" || ia[3] != "s1" {
		t.Errorf("implied args %v", ia)
	}
}

// One line, one timestamp: the slog record's, and the message as raft
// gave it (no second timestamp or [LEVEL] inside it).
func TestOneTimestampPerLine(t *testing.T) {
	var buf bytes.Buffer
	l := New(slog.New(slog.NewJSONHandler(&buf, nil)))
	l.Warn("failed to contact", "server-id", "n2")
	line := strings.TrimSpace(buf.String())
	if strings.Count(line, `"time":`) != 1 {
		t.Fatalf("want one time field: %s", line)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(line), &m); err != nil {
		t.Fatal(err)
	}
	if m["msg"] != "failed to contact" || m["server-id"] != "n2" || m["level"] != "WARN" {
		t.Fatalf("%v", m)
	}
	buf.Reset()
	tl := New(slog.New(slog.NewTextHandler(&buf, nil)))
	tl.Info("entering leader state", "leader", "n1")
	if got := buf.String(); strings.Count(got, "time=") != 1 || !strings.Contains(got, `msg="entering leader state" leader=n1`) {
		t.Fatalf("text line %q", got)
	}
}

func TestRoutineMessagesAreDemotedOnlyInTheRoutineCase(t *testing.T) {
	l, lines := newJSON(slog.LevelInfo)
	l.Warn("heartbeat timeout reached, starting election", "last-leader-addr", "", "last-leader-id", "")
	l.Warn("heartbeat timeout reached, starting election", "last-leader-addr", "127.0.0.1:1", "last-leader-id", "n1")
	l.Warn("failed to get previous log", "previous-index", uint64(9), "last-index", uint64(0), "error", errors.New("log not found"))
	l.Warn("failed to get previous log", "previous-index", uint64(9), "last-index", uint64(4), "error", errors.New("log not found"))
	l.Warn("appendEntries rejected, sending older logs", "peer", "n2", "next", uint64(1))
	l.Warn("appendEntries rejected, sending older logs", "peer", "n2", "next", uint64(7))
	l.Error("heartbeat timeout reached, starting election", "last-leader-id", "") // demoted too: never raised
	l.Debug("heartbeat timeout reached, starting election", "last-leader-id", "") // never raised
	l.Error("failed to heartbeat to", "peer", "n2")
	want := []string{"INFO", "WARN", "INFO", "WARN", "INFO", "WARN", "INFO", "ERROR"}
	got := lines()
	if len(got) != len(want) {
		t.Fatalf("%d lines, want %d: %v", len(got), len(want), got)
	}
	for i, m := range got {
		if m["level"] != want[i] {
			t.Errorf("line %d %v %v: level %v, want %s", i, m["msg"], m, m["level"], want[i])
		}
	}
	for _, d := range demotions {
		if d.why == "" || d.level != hclog.Info {
			t.Errorf("%q: every demotion says why and goes to INFO, not lower", d.msg)
		}
	}
}

func TestStandardWriter(t *testing.T) {
	l, lines := newJSON(LevelTrace)
	w := l.StandardWriter(&hclog.StandardLoggerOptions{InferLevels: true})
	w.Write([]byte("[WARN] disk slow\n"))
	w.Write([]byte("plain\n"))
	l.StandardLogger(&hclog.StandardLoggerOptions{ForceLevel: hclog.Error}).Print("[DEBUG] forced")
	l.StandardLogger(nil).Print("[ERROR] as info")
	got := lines()
	want := [][2]string{{"WARN", "disk slow"}, {"INFO", "plain"}, {"ERROR", "forced"}, {"INFO", "[ERROR] as info"}}
	if len(got) != len(want) {
		t.Fatalf("%v", got)
	}
	for i, m := range got {
		if m["level"] != want[i][0] || m["msg"] != want[i][1] {
			t.Errorf("line %d: %v %q, want %v", i, m["level"], m["msg"], want[i])
		}
	}
}

type node struct{ addr string }

func (n *node) String() string { return "Node at " + n.addr }

// raft logs itself ("entering leader state", "leader", r) and its peers as
// Stringers; a JSON handler must not print them as {}.
func TestStringersAreStrings(t *testing.T) {
	l, lines := newJSON(slog.LevelInfo)
	l.Info("entering leader state", "leader", &node{"127.0.0.1:7480"}, "err", errors.New("boom"))
	got := lines()
	if len(got) != 1 || got[0]["leader"] != "Node at 127.0.0.1:7480" || got[0]["err"] != "boom" {
		t.Fatalf("got %v", got)
	}
}
