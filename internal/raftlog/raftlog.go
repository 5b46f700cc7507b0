// Package raftlog gives hashicorp/raft and raft-wal an hclog.Logger that
// writes to a *slog.Logger, so their lines come out in the server's own
// format (text or JSON) with one timestamp and follow its level.
//
// Levels map as Trace -> slog.LevelDebug-4, Debug -> slog.LevelDebug,
// Info -> slog.LevelInfo, Warn -> slog.LevelWarn, Error -> slog.LevelError.
// Key/value arguments become slog attributes; a logger's name (Named,
// ResetNamed) is the attribute "logger". IsTrace..IsError answer what the
// slog handler's Enabled answers, so raft skips work for lines nobody sees.
//
// A few messages raft logs above INFO are routine on a healthy cluster (a
// fresh node's first election, the log matching that fills a node that
// has just joined). They are logged at INFO instead; see demotions. Every
// other line keeps raft's level.
package raftlog

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"strings"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
)

// LevelTrace is the slog level of hclog's Trace: below slog.LevelDebug.
const LevelTrace = slog.LevelDebug - 4

// demotion lowers the level of one raft message when its arguments show it
// is the routine case.
type demotion struct {
	msg     string
	level   hclog.Level
	argKey  string // the argument that must hold argWant
	argWant string // compared with fmt.Sprint of the value
	why     string
}

// demotions are raft messages that are WARN in raft but seen on every
// healthy start or join (cmd/fencelock's TestLogsHealthy* find them).
// Each is demoted only in the case named, so the same message in a real
// failure keeps its level.
var demotions = []demotion{
	{msg: "heartbeat timeout reached, starting election", level: hclog.Info, argKey: "last-leader-id", argWant: "",
		why: "no leader was ever known: the first election of a node that has just started, not a lost leader"},
	{msg: "failed to get previous log", level: hclog.Info, argKey: "last-index", argWant: "0",
		why: "the follower's log is empty: a node that has just joined, about to be sent the log"},
	{msg: "appendEntries rejected, sending older logs", level: hclog.Info, argKey: "next", argWant: "1",
		why: "the leader goes back to the first entry: the new node's log is empty"},
}

// demote is the level msg is logged at given raft's level and args.
func demote(level hclog.Level, msg string, args []any) hclog.Level {
	for _, d := range demotions {
		if d.msg != msg || d.level >= level {
			continue
		}
		for i := 0; i+1 < len(args); i += 2 {
			if k, ok := args[i].(string); ok && k == d.argKey && fmt.Sprint(args[i+1]) == d.argWant {
				return d.level
			}
		}
	}
	return level
}

// Logger is an hclog.Logger over a *slog.Logger. Make one with New.
type Logger struct {
	log     *slog.Logger // carries the implied args
	name    string
	implied []any
	// min is the level set by SetLevel, shared with every logger derived
	// from this one; hclog.NoLevel leaves the choice to the handler.
	min *atomic.Int32
}

var _ hclog.Logger = (*Logger)(nil)

// New returns an hclog.Logger writing to log.
func New(log *slog.Logger) *Logger {
	return &Logger{log: log, min: new(atomic.Int32)}
}

// SlogLevel maps an hclog level to slog's.
func SlogLevel(l hclog.Level) slog.Level {
	switch l {
	case hclog.Trace:
		return LevelTrace
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	}
	return slog.LevelInfo // Info, and NoLevel as hclog treats it
}

func (l *Logger) enabled(level hclog.Level) bool {
	if level == hclog.Off {
		return false
	}
	if min := hclog.Level(l.min.Load()); min != hclog.NoLevel && level < min {
		return false
	}
	return l.log.Enabled(context.Background(), SlogLevel(level))
}

// Log emits msg at level with args as attributes.
func (l *Logger) Log(level hclog.Level, msg string, args ...any) {
	if level == hclog.NoLevel {
		level = hclog.Info
	}
	level = demote(level, msg, args)
	if !l.enabled(level) {
		return
	}
	attrs := attrsOf(args)
	if l.name != "" {
		attrs = append([]slog.Attr{slog.String("logger", l.name)}, attrs...)
	}
	l.log.LogAttrs(context.Background(), SlogLevel(level), msg, attrs...)
}

// attrsOf turns hclog's alternating keys and values into attributes. A key
// that is not a string is printed; a value without a key is kept under
// EXTRA_VALUE_AT_END, as hclog does.
func attrsOf(args []any) []slog.Attr {
	if len(args) == 0 {
		return nil
	}
	attrs := make([]slog.Attr, 0, (len(args)+1)/2)
	for i := 0; i < len(args); i += 2 {
		if i+1 == len(args) {
			attrs = append(attrs, slog.Any("EXTRA_VALUE_AT_END", value(args[i])))
			break
		}
		k, ok := args[i].(string)
		if !ok {
			k = fmt.Sprint(args[i])
		}
		attrs = append(attrs, slog.Any(k, value(args[i+1])))
	}
	return attrs
}

// value renders hclog's formatting wrappers as hclog would.
func value(v any) any {
	switch v := v.(type) {
	case hclog.Format:
		if len(v) == 0 {
			return ""
		}
		if f, ok := v[0].(string); ok {
			return fmt.Sprintf(f, v[1:]...)
		}
		return fmt.Sprint(v...)
	case hclog.Hex:
		return fmt.Sprintf("0x%x", int(v))
	case hclog.Octal:
		return fmt.Sprintf("0%o", int(v))
	case hclog.Binary:
		return fmt.Sprintf("0b%b", int(v))
	case hclog.Quote:
		return fmt.Sprintf("%q", string(v))
	case error:
		return v
	case fmt.Stringer:
		// hclog prints a Stringer with String; raft passes itself and
		// its peers this way, and a JSON handler would otherwise print
		// their unexported fields as {}.
		return v.String()
	}
	return v
}

// Trace emits msg at TRACE.
func (l *Logger) Trace(msg string, args ...any) { l.Log(hclog.Trace, msg, args...) }

// Debug emits msg at DEBUG.
func (l *Logger) Debug(msg string, args ...any) { l.Log(hclog.Debug, msg, args...) }

// Info emits msg at INFO.
func (l *Logger) Info(msg string, args ...any) { l.Log(hclog.Info, msg, args...) }

// Warn emits msg at WARN.
func (l *Logger) Warn(msg string, args ...any) { l.Log(hclog.Warn, msg, args...) }

// Error emits msg at ERROR.
func (l *Logger) Error(msg string, args ...any) { l.Log(hclog.Error, msg, args...) }

// IsTrace reports whether TRACE lines are written.
func (l *Logger) IsTrace() bool { return l.enabled(hclog.Trace) }

// IsDebug reports whether DEBUG lines are written.
func (l *Logger) IsDebug() bool { return l.enabled(hclog.Debug) }

// IsInfo reports whether INFO lines are written.
func (l *Logger) IsInfo() bool { return l.enabled(hclog.Info) }

// IsWarn reports whether WARN lines are written.
func (l *Logger) IsWarn() bool { return l.enabled(hclog.Warn) }

// IsError reports whether ERROR lines are written.
func (l *Logger) IsError() bool { return l.enabled(hclog.Error) }

// ImpliedArgs returns the key/value pairs given to With.
func (l *Logger) ImpliedArgs() []any { return append([]any(nil), l.implied...) }

// With returns a logger that adds args to every line.
func (l *Logger) With(args ...any) hclog.Logger {
	c := *l
	c.implied = append(append([]any(nil), l.implied...), args...)
	c.log = l.log.With(anys(attrsOf(args))...)
	return &c
}

func anys(attrs []slog.Attr) []any {
	out := make([]any, len(attrs))
	for i, a := range attrs {
		out[i] = a
	}
	return out
}

// Name is the logger's name, "" when it has none.
func (l *Logger) Name() string { return l.name }

// Named returns a logger whose name is this one's with name appended.
func (l *Logger) Named(name string) hclog.Logger {
	c := *l
	if c.name != "" {
		name = c.name + "." + name
	}
	c.name = name
	return &c
}

// ResetNamed returns a logger named name.
func (l *Logger) ResetNamed(name string) hclog.Logger {
	c := *l
	c.name = name
	return &c
}

// SetLevel raises (or lowers) the level below which this logger and every
// logger made from it write nothing; the slog handler's own level still
// applies. hclog.NoLevel leaves the choice to the handler again.
func (l *Logger) SetLevel(level hclog.Level) { l.min.Store(int32(level)) }

// GetLevel is the lowest level that is written.
func (l *Logger) GetLevel() hclog.Level {
	for _, lv := range []hclog.Level{hclog.Trace, hclog.Debug, hclog.Info, hclog.Warn, hclog.Error} {
		if l.enabled(lv) {
			return lv
		}
	}
	return hclog.Off
}

// StandardLogger returns a *log.Logger whose lines go through l.
func (l *Logger) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(l.StandardWriter(opts), "", 0)
}

// StandardWriter returns a writer whose lines go through l, at INFO unless
// opts forces a level or asks to infer it from a [LEVEL] prefix.
func (l *Logger) StandardWriter(opts *hclog.StandardLoggerOptions) io.Writer {
	if opts == nil {
		opts = &hclog.StandardLoggerOptions{}
	}
	return &stdWriter{l: l, opts: *opts}
}

type stdWriter struct {
	l    *Logger
	opts hclog.StandardLoggerOptions
}

var prefixes = []struct {
	p string
	l hclog.Level
}{
	{"[TRACE]", hclog.Trace}, {"[DEBUG]", hclog.Debug}, {"[INFO]", hclog.Info},
	{"[WARN]", hclog.Warn}, {"[ERROR]", hclog.Error}, {"[ERR]", hclog.Error},
}

func (w *stdWriter) Write(p []byte) (int, error) {
	line := string(bytes.TrimRight(p, " \t\n"))
	level := hclog.Info
	if w.opts.InferLevels || w.opts.ForceLevel != hclog.NoLevel {
		if w.opts.InferLevelsWithTimestamp {
			line = strings.TrimLeft(line, "0123456789 :/.+-TZ")
		}
		for _, pr := range prefixes {
			if strings.HasPrefix(line, pr.p) {
				level, line = pr.l, strings.TrimSpace(line[len(pr.p):])
				break
			}
		}
	}
	if w.opts.ForceLevel != hclog.NoLevel {
		level = w.opts.ForceLevel
	}
	w.l.Log(level, line)
	return len(p), nil
}
