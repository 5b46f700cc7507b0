//go:build unix

package server

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencelock/fencelock/api"
)

// BenchmarkServiceCycle is W1 below the transport: the service's Acquire
// then Release of a free key, on a single node whose raft log, stable
// store and snapshots are on disk (t.TempDir), so each commit is fsynced.
// "serial" is one caller; "parallel" is 64 callers on their own keys, as
// W1's 64 clients are, so raft batches what they propose. cpu-ns/op is
// the process's CPU time per cycle (cpuTime), which a shared machine's
// disk moves less than it moves ns/op.
//
//	go test ./internal/server/ -run '^$' -bench ServiceCycle -benchmem
func BenchmarkServiceCycle(b *testing.B) {
	for _, mode := range []string{"serial", "parallel"} {
		b.Run(mode, func(b *testing.B) {
			s, err := New(fastConfig(b.TempDir()))
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := s.WaitReady(ctx); err != nil {
				b.Fatal(err)
			}
			var client atomic.Int64
			cycle := func(key, holder string) {
				l, err := s.Acquire(ctx, "", api.AcquireRequest{Key: key, Holder: holder, TTLMs: 10000})
				if err != nil {
					b.Error(err)
					return
				}
				if r, err := s.Release(ctx, api.ReleaseRequest{Key: key, Holder: holder, Token: l.Token}); err != nil || !r.Released {
					b.Error("release", r, err)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			before := cpuTime()
			defer func() { b.ReportMetric(float64(cpuTime()-before)/float64(b.N), "cpu-ns/op") }()
			if mode == "serial" {
				for i := 0; i < b.N; i++ {
					cycle("w1/"+strconv.Itoa(i%10000), "client-0")
				}
				return
			}
			b.SetParallelism(32) // x GOMAXPROCS (2 here): 64 callers
			b.RunParallel(func(pb *testing.PB) {
				holder := "client-" + strconv.FormatInt(client.Add(1), 10)
				i := 0
				for pb.Next() {
					i++
					cycle(holder+"/"+strconv.Itoa(i%100), holder)
				}
			})
		})
	}
}
