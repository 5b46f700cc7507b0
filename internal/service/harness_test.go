package service

import (
	"log/slog"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/fencelock/fencelock/clock"
	"github.com/fencelock/fencelock/internal/replica/replicatest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testConfig is a service's configuration for tests: lease time on fake,
// ticks as fine as the fake clock lets them be.
func testConfig(fake clock.Clock) Config {
	return Config{
		NodeID: "n1", Clock: fake, Logger: slog.New(slog.DiscardHandler),
		ApplyTimeout: 5 * time.Second, MinTickInterval: time.Nanosecond, ClockCheckpoint: time.Hour,
		JoinCatchUp: time.Second, AnnounceEvery: time.Second,
		MaxWaitersPerKey: 1000, MaxWaiters: 100000,
		WatchHistory: 10000, WatchMaxWatchers: 10000, WatchMaxPerCaller: 1000,
	}
}

// newTestService is the real service over an in-memory log
// (internal/replica/replicatest) on a fake clock, ready: no raft, no disk.
func newTestService(t *testing.T) (*Service, *replicatest.Log, *clock.Fake) {
	t.Helper()
	return newTestServiceWith(t, func(*Config) {})
}

// eventually polls cond until it holds (a bound on a hang, not a timing).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
