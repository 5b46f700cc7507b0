package service

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/clock"
	"github.com/fencelock/fencelock/internal/node"
	"github.com/fencelock/fencelock/internal/node/etcd"
)

// newEtcdService is the real service over a node alone on the etcd
// engine (etcd.Open) in dir, ready; stop closes both, service first.
func newEtcdService(t *testing.T, dir string, fake *clock.Fake, floor uint64) (s *Service, stop func()) {
	t.Helper()
	s, err := New(testConfig(fake))
	if err != nil {
		t.Fatal(err)
	}
	n, err := etcd.Open(node.Config{
		DataDir: dir, NodeID: "n1", TokenFloor: floor,
		HeartbeatTimeout: 50 * time.Millisecond, ElectionTimeout: 50 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler),
	}, s.FSM())
	if err != nil {
		t.Fatal(err)
	}
	s.Start(n)
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			s.Close()
			if err := n.Close(); err != nil {
				t.Error(err)
			}
		}
	}
	t.Cleanup(stop)
	waitReady(t, s)
	return s, stop
}

// The service over the etcd engine on a real data dir: the recover floor
// given at the first start is committed before the first grant, grants,
// refusals and releases answer as over the in-memory log, and after a
// restart the held locks are back and new tokens are above every token
// answered before.
func TestServiceOverEtcdEngine(t *testing.T) {
	dir := t.TempDir()
	fake := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	s, stop := newEtcdService(t, dir, fake, 5000)
	ctx := context.Background()
	a := mustAcquire(t, s, api.AcquireRequest{Key: "a", Holder: "h1", TTLMs: 600000})
	if a.Token != 5001 {
		t.Fatalf("first token after a floor of 5000: %d", a.Token)
	}
	b := mustAcquire(t, s, api.AcquireRequest{Key: "b", Holder: "h1", TTLMs: 600000})
	if b.Token != a.Token+1 {
		t.Fatalf("second token %d after %d", b.Token, a.Token)
	}
	_, err := s.Acquire(ctx, "", api.AcquireRequest{Key: "a", Holder: "h2", TTLMs: 600000})
	wantCode(t, err, api.CodeHeld)
	if _, err := s.Release(ctx, api.ReleaseRequest{Key: "b", Holder: "h1", Token: b.Token}); err != nil {
		t.Fatal(err)
	}
	c := mustAcquire(t, s, api.AcquireRequest{Key: "b", Holder: "h2", TTLMs: 600000})
	if c.Token <= b.Token {
		t.Fatalf("token %d after a release of %d", c.Token, b.Token)
	}
	stop()

	s, _ = newEtcdService(t, dir, fake, 5000)
	for key, tok := range map[string]uint64{"a": a.Token, "b": c.Token} {
		if chk, err := s.Check(ctx, key, tok); err != nil || !chk.Valid {
			t.Fatalf("after a restart, %s's token %d: %+v, %v", key, tok, chk, err)
		}
	}
	if d := mustAcquire(t, s, api.AcquireRequest{Key: "d", Holder: "h1", TTLMs: 600000}); d.Token <= c.Token {
		t.Fatalf("token %d after a restart, not above %d", d.Token, c.Token)
	}
}
