//go:build pprof

package main

import (
	"os"
	"syscall"
	"time"

	gometrics "github.com/armon/go-metrics"
)

// FENCELOCK_RAFT_METRICS=1 (pprof builds only) collects raft's own timings
// in memory; SIGUSR1 dumps them to stderr.
func init() {
	if os.Getenv("FENCELOCK_RAFT_METRICS") == "" {
		return
	}
	sink := gometrics.NewInmemSink(10*time.Second, time.Minute)
	cfg := gometrics.DefaultConfig("fl")
	cfg.EnableRuntimeMetrics = false
	gometrics.NewGlobal(cfg, sink)
	gometrics.NewInmemSignal(sink, syscall.SIGUSR1, os.Stderr)
}
