package server

import (
	"context"
	"fmt"
	"runtime"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/service"
)

// BenchmarkWatchFanOut: 1,000 watchers long-poll every key (the service
// call, as each transport makes it) while b.N grants are applied one at a
// time. It reports the events delivered per second (grants x watchers),
// the time from a grant's apply (its Acquire returned) to its delivery at
// the median watcher and at the last one, and the memory each waiting
// watcher costs (heap and goroutine stack).
//
//	go test ./internal/server/ -run '^$' -bench WatchFanOut -benchtime 300x
func BenchmarkWatchFanOut(b *testing.B) {
	const watchers = 1000
	cfg := fastConfig("")
	cfg.WatchMaxWatchers, cfg.WatchMaxPerCaller = -1, -1
	s, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := s.WaitReady(ctx); err != nil {
		b.Fatal(err)
	}

	type delivery struct {
		token uint64
		at    time.Time
	}
	got := make([]chan delivery, watchers)
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var wg sync.WaitGroup
	start := s.Revision()
	for i := range watchers {
		got[i] = make(chan delivery, 1) // one grant at a time
		wg.Add(1)
		go func() {
			defer wg.Done()
			after := start
			for {
				resp, err := s.Watch(ctx, api.WatchRequest{After: &after, WaitMs: api.Ms(time.Minute)}, service.WatchScope{})
				if err != nil {
					return
				}
				now := time.Now()
				for _, e := range resp.Events {
					got[i] <- delivery{e.Token, now}
				}
				after = resp.Revision
			}
		}()
	}
	for testWatchers(s) < watchers {
		time.Sleep(time.Millisecond)
	}
	var waiting runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&waiting)
	perWatcher := float64(int64(waiting.HeapInuse+waiting.StackInuse)-int64(before.HeapInuse+before.StackInuse)) / watchers

	var median, last []time.Duration
	b.ResetTimer()
	began := time.Now()
	for n := range b.N {
		l, err := s.Acquire(ctx, "", api.AcquireRequest{Key: fmt.Sprintf("k%d", n), Holder: "h", TTLMs: 60000})
		if err != nil {
			b.Fatal(err)
		}
		applied := time.Now()
		lat := make([]time.Duration, watchers)
		for i := range watchers {
			d := <-got[i]
			if d.token != l.Token {
				b.Fatalf("watcher %d got token %d, want %d", i, d.token, l.Token)
			}
			lat[i] = d.at.Sub(applied)
		}
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		median, last = append(median, lat[watchers/2]), append(last, lat[watchers-1])
	}
	elapsed := time.Since(began)
	b.StopTimer()
	cancel()
	wg.Wait()
	pct := func(ds []time.Duration, p float64) float64 {
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		return float64(ds[int(p*float64(len(ds)-1))].Microseconds())
	}
	b.ReportMetric(float64(b.N*watchers)/elapsed.Seconds(), "events/s")
	b.ReportMetric(pct(median, 0.5), "p50-median-µs")
	b.ReportMetric(pct(last, 0.5), "p50-last-µs")
	b.ReportMetric(pct(last, 0.99), "p99-last-µs")
	b.ReportMetric(perWatcher, "B/watcher")
}

// BenchmarkWatchFanOutBurst: the same 1,000 watchers (and, to compare,
// none) while 8 writers grant b.N keys as fast as they can; each watcher
// takes its events in batches (up to api.MaxWatchLimit an answer). It
// reports the events delivered per second in all, and the grants.
//
//	go test ./internal/server/ -run '^$' -bench WatchFanOutBurst -benchtime 5000x
func BenchmarkWatchFanOutBurst(b *testing.B) {
	for _, n := range []int{0, 1000} {
		b.Run(fmt.Sprintf("watchers=%d", n), func(b *testing.B) { benchBurst(b, n) })
	}
}

func benchBurst(b *testing.B, watchers int) {
	const writers = 8
	cfg := fastConfig("")
	cfg.WatchMaxWatchers, cfg.WatchMaxPerCaller = -1, -1
	cfg.WatchHistory = max(b.N, 10000)
	s, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := s.WaitReady(ctx); err != nil {
		b.Fatal(err)
	}
	start := s.Revision()
	var wg sync.WaitGroup
	finished := make(chan struct{}, watchers)
	for range watchers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			after, n := start, 0
			for n < b.N {
				resp, err := s.Watch(ctx, api.WatchRequest{After: &after, WaitMs: api.Ms(time.Minute)}, service.WatchScope{})
				if err != nil {
					return
				}
				n += len(resp.Events)
				after = resp.Revision
			}
			finished <- struct{}{}
		}()
	}
	for testWatchers(s) < watchers {
		time.Sleep(time.Millisecond)
	}
	b.ResetTimer()
	began := time.Now()
	var ww sync.WaitGroup
	for w := range writers {
		ww.Add(1)
		go func() {
			defer ww.Done()
			for n := w; n < b.N; n += writers {
				if _, err := s.Acquire(ctx, "", api.AcquireRequest{Key: fmt.Sprintf("k%d", n), Holder: "h", TTLMs: 60000}); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	ww.Wait()
	for range watchers {
		<-finished
	}
	elapsed := time.Since(began)
	b.StopTimer()
	cancel()
	wg.Wait()
	if watchers > 0 {
		b.ReportMetric(float64(b.N*watchers)/elapsed.Seconds(), "events/s")
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "grants/s")
}
