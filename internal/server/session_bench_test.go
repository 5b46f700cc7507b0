//go:build unix

package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/locktable"
)

// BenchmarkRenewalRound10k is one renewal round of 10,000 locks over HTTP
// on a single in-memory node: one POST /v1/session/extend of the session
// that holds them all, against ten POST /v1/extend-batch of 1,000 separate
// leases each (the fewest requests 10,000 leases can be renewed with). It
// reports rounds/s, locks renewed per second, and the CPU time of the
// whole process (client and server) per round.
//
//	go test ./internal/server/ -run '^$' -bench RenewalRound10k -benchtime 3s
//
// The locks are loaded by applying commands to the state machine
// directly; the renewals take the real path (HTTP, raft, apply).
func BenchmarkRenewalRound10k(b *testing.B) {
	const n = 10000
	for _, mode := range []string{"session", "leases"} {
		b.Run(mode, func(b *testing.B) {
			s, err := New(fastConfig(""))
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
			ttl := locktable.Duration(time.Hour)
			idx := s.fsm.AppliedIndex() + 1000
			apply := func(c fsm.Command) *fsm.Result {
				idx++
				c.Now = now
				r := s.fsm.ApplyCommand(idx, c)
				if r.Err != nil {
					b.Fatal(r.Err)
				}
				return r
			}
			var bodies [][]byte
			if mode == "session" {
				id := apply(fsm.Command{Op: fsm.OpSessionOpen, Holder: "svc", TTL: ttl}).Session.ID
				for i := 0; i < n; i++ {
					apply(fsm.Command{Op: fsm.OpAcquire, Key: fmt.Sprintf("k/%05d", i), Holder: "svc", Session: id})
				}
				body, _ := json.Marshal(api.SessionRequest{ID: id, Holder: "svc"})
				bodies = append(bodies, body)
			} else {
				items := make([]api.BatchItem, 0, api.MaxBatch)
				for i := 0; i < n; i++ {
					r := apply(fsm.Command{Op: fsm.OpAcquire, Key: fmt.Sprintf("k/%05d", i), Holder: "svc", TTL: ttl})
					items = append(items, api.BatchItem{Key: r.Lease.Key, Token: r.Lease.Token})
					if len(items) == api.MaxBatch {
						body, _ := json.Marshal(api.ExtendBatchRequest{Holder: "svc", TTLMs: api.Ms(time.Hour), Leases: items})
						bodies = append(bodies, body)
						items = items[:0]
					}
				}
			}
			path := api.PathSessionExtend
			if mode == "leases" {
				path = api.PathExtendBatch
			}
			hc := hs.Client()
			round := func() {
				for _, body := range bodies {
					resp, err := hc.Post(hs.URL+path, api.ContentType, bytes.NewReader(body))
					if err != nil {
						b.Fatal(err)
					}
					var out struct {
						Results []api.BatchResult `json:"results"`
						Locks   int               `json:"locks"`
					}
					err = json.NewDecoder(resp.Body).Decode(&out)
					resp.Body.Close()
					if err != nil || resp.StatusCode != 200 {
						b.Fatalf("%s: %d %v", path, resp.StatusCode, err)
					}
					if mode == "session" && out.Locks != n {
						b.Fatalf("session holds %d locks", out.Locks)
					}
					for _, r := range out.Results {
						if !r.OK {
							b.Fatalf("extend refused: %+v", r)
						}
					}
				}
			}
			round() // warm the connection
			before := cpuTime()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				round()
			}
			b.StopTimer()
			cpu := cpuTime() - before
			secs := b.Elapsed().Seconds()
			b.ReportMetric(float64(b.N)/secs, "rounds/s")
			b.ReportMetric(float64(b.N)*n/secs, "locks-renewed/s")
			b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu-ms/round")
		})
	}
}

// cpuTime is the process's user plus system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
