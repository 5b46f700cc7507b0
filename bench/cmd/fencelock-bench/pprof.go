package main

// FLBENCH_PPROF=127.0.0.1:6061 serves net/http/pprof on that address, so
// the driver's own CPU, allocations and scheduling can be profiled beside
// the server's (the server's is FENCELOCK_PPROF, built with -tags pprof):
// a cycle's cost is both ends' (docs/BENCHMARKS.md, issue 45).

import (
	"net"
	"net/http"
	_ "net/http/pprof"
	"os"
)

func init() {
	addr := os.Getenv("FLBENCH_PPROF")
	if addr == "" {
		return
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return
	}
	go http.Serve(ln, http.DefaultServeMux) // lives as long as the process
}
