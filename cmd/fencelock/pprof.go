//go:build pprof

package main

// Built only with -tags pprof, for benchmarking: FENCELOCK_PPROF=127.0.0.1:6060
// serves net/http/pprof on that address so a CPU profile of the server can be
// taken under load (docs/BENCHMARKS-peers.md). Release builds carry none of it.

import (
	"net"
	"net/http"
	_ "net/http/pprof"
	"os"
)

func init() {
	addr := os.Getenv("FENCELOCK_PPROF")
	if addr == "" {
		return
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return
	}
	go http.Serve(ln, http.DefaultServeMux) // lives as long as the process
}
