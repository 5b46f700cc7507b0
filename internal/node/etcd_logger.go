package node

// etcdNopLogger silences etcd's raft logger (library code logs only
// through the logger in Config; wiring it to slog comes with the node).
// Panic and Fatal still end the process, as etcd expects of them.
type etcdNopLogger struct{}

func (etcdNopLogger) Debug(...any)                   {}
func (etcdNopLogger) Debugf(string, ...any)          {}
func (etcdNopLogger) Error(...any)                   {}
func (etcdNopLogger) Errorf(string, ...any)          {}
func (etcdNopLogger) Info(...any)                    {}
func (etcdNopLogger) Infof(string, ...any)           {}
func (etcdNopLogger) Warning(...any)                 {}
func (etcdNopLogger) Warningf(string, ...any)        {}
func (etcdNopLogger) Fatal(v ...any)                 { panic(v) }
func (etcdNopLogger) Fatalf(format string, v ...any) { panic(format) }
func (etcdNopLogger) Panic(v ...any)                 { panic(v) }
func (etcdNopLogger) Panicf(format string, v ...any) { panic(format) }
