package etcd

import (
	"fmt"
	"log/slog"
)

// etcdLogger is etcd raft's logger over the node's slog logger
// (Config.Logger). Panic and Fatal log, then panic as raft expects them
// to: the core recovers that panic and halts the node (core.run).
type etcdLogger struct{ log *slog.Logger }

func (l etcdLogger) Debug(v ...any)                 { l.log.Debug(fmt.Sprint(v...)) }
func (l etcdLogger) Debugf(format string, v ...any) { l.log.Debug(fmt.Sprintf(format, v...)) }
func (l etcdLogger) Info(v ...any)                  { l.log.Info(fmt.Sprint(v...)) }
func (l etcdLogger) Infof(format string, v ...any)  { l.log.Info(fmt.Sprintf(format, v...)) }
func (l etcdLogger) Warning(v ...any)               { l.log.Warn(fmt.Sprint(v...)) }
func (l etcdLogger) Warningf(format string, v ...any) {
	l.log.Warn(fmt.Sprintf(format, v...))
}
func (l etcdLogger) Error(v ...any)                 { l.log.Error(fmt.Sprint(v...)) }
func (l etcdLogger) Errorf(format string, v ...any) { l.log.Error(fmt.Sprintf(format, v...)) }
func (l etcdLogger) Fatal(v ...any)                 { l.Panic(v...) }
func (l etcdLogger) Fatalf(format string, v ...any) { l.Panicf(format, v...) }
func (l etcdLogger) Panic(v ...any) {
	msg := fmt.Sprint(v...)
	l.log.Error(msg)
	panic(msg)
}
func (l etcdLogger) Panicf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	l.log.Error(msg)
	panic(msg)
}
