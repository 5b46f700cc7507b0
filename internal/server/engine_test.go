package server

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/node"
	"github.com/fencelock/fencelock/internal/node/hashicorp"
	"github.com/fencelock/fencelock/internal/replica"
)

// raftNode is s's hashicorp node, for the tests of what only it does
// (raft's stats, a transfer to a named voter).
func (s *Server) raftNode(t testing.TB) *hashicorp.Node {
	t.Helper()
	n, ok := s.node.(*hashicorp.Node)
	if !ok && etcdEngine() {
		t.Skip("a test of what only the hashicorp engine does (FENCELOCK_TEST_ENGINE=etcd)")
	}
	if !ok {
		t.Fatalf("the node is a %T, not the hashicorp engine's", s.node)
	}
	return n
}

// snapshotter is s's node, of either engine, as one that takes a
// snapshot on demand.
func (s *Server) snapshotter(t testing.TB) interface{ Snapshot() error } {
	t.Helper()
	n, ok := s.node.(interface{ Snapshot() error })
	if !ok {
		t.Fatalf("the node %T takes no snapshot on demand", s.node)
	}
	return n
}

func etcdServerConfig(dir string) Config {
	return Config{
		DataDir: dir, Engine: node.EngineEtcd,
		HeartbeatTimeout: 50 * time.Millisecond, ElectionTimeout: 50 * time.Millisecond,
		LeaderLeaseTimeout: 50 * time.Millisecond,
		Logger:             slog.New(slog.DiscardHandler),
	}
}

func readyServer(t *testing.T, cfg Config) *Server {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.WaitReady(ctx); err != nil {
		s.Close()
		t.Fatalf("server never became ready: %v", err)
	}
	return s
}

// The server on the etcd engine (Config.Engine): it serves and restarts
// with its tokens above every one answered, and a data dir belongs to the
// engine that first ran on it.
func TestServerEngineEtcd(t *testing.T) {
	dir := t.TempDir()
	s := readyServer(t, etcdServerConfig(dir))
	ctx := context.Background()
	var last uint64
	for _, k := range []string{"a", "b", "c"} {
		l, err := s.Acquire(ctx, "", api.AcquireRequest{Key: k, Holder: "h", TTLMs: 600000})
		if err != nil || l.Token <= last {
			t.Fatalf("acquire %s: %+v %v (last %d)", k, l, err, last)
		}
		last = l.Token
	}
	if st := s.node.Status(); st.State != replica.Leader {
		t.Fatalf("status %+v", st)
	}
	s.BeginShutdown()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	hcfg := etcdServerConfig(dir)
	hcfg.Engine = ""
	if s, err := New(hcfg); err == nil {
		s.Close()
		t.Fatal("the hashicorp engine started on an etcd data dir")
	} else if !strings.Contains(err.Error(), "--engine etcd") {
		t.Fatalf("refusal %v does not name the engine to use", err)
	}

	s = readyServer(t, etcdServerConfig(dir))
	defer s.Close()
	l, err := s.Acquire(ctx, "", api.AcquireRequest{Key: "d", Holder: "h", TTLMs: 600000})
	if err != nil || l.Token <= last {
		t.Fatalf("after a restart: %+v %v, want a token above %d", l, err, last)
	}
}

func TestServerEngineRefusals(t *testing.T) {
	for name, edit := range map[string]func(*Config){
		"an unknown engine": func(c *Config) { c.Engine = "paxos" },
		"etcd with a hashicorp transport": func(c *Config) {
			c.Transport = hashicorp.NewInmemTransport("a")
		},
	} {
		cfg := etcdServerConfig(t.TempDir())
		edit(&cfg)
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), "Engine") {
			t.Fatalf("%s: %v, want a refusal naming Engine", name, err)
		}
	}
}
