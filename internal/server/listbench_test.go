package server

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/locktable"
)

// BenchmarkExtendWhileListing measures what lists do to writes: a holder
// extends its lease back to back over HTTP on a single in-memory node
// whose table holds FENCELOCK_BENCH_KEYS leases (default 1,000,000) while
// FENCELOCK_BENCH_LISTERS loops (default 16) call GET /v1/locks with
// limit=1 and limit=1000 (the sub-benchmarks) as fast as they can. It
// reports extend p50, p99 and max and the lists answered per second. Run
// it with a fixed count, e.g.
//
//	go test ./internal/server/ -run '^$' -bench ExtendWhileListing -benchtime 300x
//
// The table is loaded by applying acquire commands to the state machine
// directly (a million proposals through raft would take minutes); the
// extends and lists take the real path. The extended lease has the
// longest TTL so that a slow extend is measured, not lost: any p99 over
// a second means a client extending a 3 s lease every second loses it.
func BenchmarkExtendWhileListing(b *testing.B) {
	keys := benchEnv(b, "FENCELOCK_BENCH_KEYS", 1_000_000, 1)
	listers := benchEnv(b, "FENCELOCK_BENCH_LISTERS", 16, 0) // 0: the baseline
	cfg := fastConfig("")
	cfg.SnapshotThreshold = 1 << 40 // no snapshot of a million leases mid-run
	cfg.SnapshotInterval = time.Hour
	s, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.WaitReady(ctx); err != nil {
		b.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler())
	defer func() {
		s.BeginShutdown()
		hs.Close()
		s.Close()
	}()
	now, _ := s.ClusterTime()
	for i := range keys {
		r := s.fsm.ApplyCommand(uint64(i+1), fsm.Command{Op: fsm.OpAcquire, Now: now,
			Key: fmt.Sprintf("bench/%08d", i), Holder: "loader", TTL: locktable.Duration(time.Hour)})
		if r.Err != nil {
			b.Fatal(r.Err)
		}
	}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: listers + 2}}
	defer hc.CloseIdleConnections()
	post := func(path, body string) (int, string) {
		resp, err := hc.Post(hs.URL+path, "application/json", strings.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(raw)
	}
	status, body := post("/v1/acquire", `{"key":"extend/me","holder":"extender","ttl_ms":86400000}`)
	if status != 200 {
		b.Fatalf("acquire: %d %s", status, body)
	}
	token := body[strings.Index(body, `"token":`)+len(`"token":`):]
	token = token[:strings.IndexByte(token, ',')]
	extend := `{"key":"extend/me","holder":"extender","token":` + token + `,"ttl_ms":86400000}`

	for _, limit := range []int{1, 1000} {
		b.Run("limit="+strconv.Itoa(limit), func(b *testing.B) {
			stop := make(chan struct{})
			var lists atomic.Int64
			var wg sync.WaitGroup
			for range listers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						select {
						case <-stop:
							return
						default:
						}
						resp, err := hc.Get(hs.URL + "/v1/locks?limit=" + strconv.Itoa(limit))
						if err != nil {
							return
						}
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						lists.Add(1)
					}
				}()
			}
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			start := time.Now()
			for range b.N {
				t0 := time.Now()
				if status, body := post("/v1/extend", extend); status != 200 {
					b.Fatalf("extend: %d %s", status, body)
				}
				lat = append(lat, time.Since(t0))
			}
			elapsed := time.Since(start)
			b.StopTimer()
			close(stop)
			wg.Wait()
			slices.Sort(lat)
			q := func(p float64) float64 {
				return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds()) / 1000
			}
			b.ReportMetric(q(0.5), "p50-ms")
			b.ReportMetric(q(0.99), "p99-ms")
			b.ReportMetric(float64(lat[len(lat)-1].Microseconds())/1000, "max-ms")
			if listers > 0 {
				b.ReportMetric(float64(lists.Load())/elapsed.Seconds(), "lists/s")
			}
		})
	}
}

func benchEnv(b *testing.B, name string, def, least int) int {
	if v := os.Getenv(name); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < least {
			b.Fatalf("%s=%q", name, v)
		}
		return n
	}
	return def
}
