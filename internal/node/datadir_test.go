package node_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/node"
	"github.com/fencelock/fencelock/internal/server"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// The node under the real server: a log on disk that grants write to,
// restarts of the process, and damage between them.

func fastConfig(dir string) server.Config {
	return server.Config{
		DataDir:            dir,
		HeartbeatTimeout:   50 * time.Millisecond,
		ElectionTimeout:    50 * time.Millisecond,
		LeaderLeaseTimeout: 50 * time.Millisecond,
		Logger:             slog.New(slog.DiscardHandler),
	}
}

type testServer struct {
	*server.Server
	once sync.Once
}

func startServer(t *testing.T, cfg server.Config) *testServer {
	t.Helper()
	s, err := server.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.WaitReady(ctx); err != nil {
		s.Close()
		t.Fatalf("server never became ready: %v", err)
	}
	ts := &testServer{Server: s}
	t.Cleanup(ts.stop)
	return ts
}

// stop closes the server; it may be called twice.
func (ts *testServer) stop() {
	ts.once.Do(func() {
		ts.BeginShutdown()
		ts.Close()
	})
}

func grantN(t *testing.T, ts *testServer, prefix string, n int) uint64 {
	t.Helper()
	var last uint64
	for i := range n {
		l, err := ts.Acquire(context.Background(), "", api.AcquireRequest{Key: fmt.Sprintf("%s/%d", prefix, i), Holder: "h", TTLMs: 600000})
		if err != nil {
			t.Fatalf("acquire: %v", err)
		}
		last = l.Token
	}
	return last
}

// liveState is the state file of the running node in dir, as last
// written.
func liveState(t *testing.T, dir string) node.DirState {
	t.Helper()
	st, err := node.ReadStateFile(dir)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// The ceiling in the state file covers every token answered, in blocks;
// a clean restart keeps the tokens dense.
func TestTokenCeilingCoversEveryGrant(t *testing.T) {
	dir := t.TempDir()
	ts := startServer(t, fastConfig(dir))
	last := grantN(t, ts, "a", 30)
	if c := liveState(t, dir).Ceiling; c < last || c > last+node.TokenBlock {
		t.Fatalf("ceiling %d for last token %d", c, last)
	}
	ts.stop()
	st, err := node.ReadStateFile(dir)
	if err != nil || st.Ceiling < last || st.Durable == 0 || st.CRCFrom != 1 {
		t.Fatalf("state on disk %+v %v", st, err)
	}
	ts = startServer(t, fastConfig(dir))
	if tok := grantN(t, ts, "b", 1); tok != last+1 {
		t.Fatalf("token after a clean restart %d, want %d", tok, last+1)
	}
}

// A pending floor (what recover leaves) is committed before the first
// grant, then cleared.
func TestPendingFloorCommittedBeforeServing(t *testing.T) {
	dir := t.TempDir()
	ts := startServer(t, fastConfig(dir))
	grantN(t, ts, "a", 3)
	ts.stop()
	if err := node.SetState(dir, func(s *node.DirState) { s.PendingFloor = 5000 }); err != nil {
		t.Fatal(err)
	}
	ts = startServer(t, fastConfig(dir))
	if tok := grantN(t, ts, "b", 1); tok != 5001 {
		t.Fatalf("first token after a floor of 5000: %d", tok)
	}
	if st := liveState(t, dir); st.PendingFloor != 0 || st.Ceiling < 5001 {
		t.Fatalf("state after the floor: %+v", st)
	}
}

func refusal(t *testing.T, dir, file string) {
	t.Helper()
	s, err := server.New(fastConfig(dir))
	if err == nil {
		s.Close()
		t.Fatalf("started on a damaged data dir (want a refusal naming %s)", file)
	}
	var de *node.DataDirError
	if !errors.As(err, &de) || !strings.Contains(err.Error(), file) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("refusal %v, want one line naming %s", err, file)
	}
}

func TestOpenStoresRefusesDamage(t *testing.T) {
	base := t.TempDir()
	ts := startServer(t, fastConfig(base))
	grantN(t, ts, "a", 5)
	ts.stop()
	copyTo := func(t *testing.T) string {
		dst := filepath.Join(t.TempDir(), "d")
		if err := os.CopyFS(dst, os.DirFS(base)); err != nil {
			t.Fatal(err)
		}
		return dst
	}
	t.Run("state file missing under a checksummed log", func(t *testing.T) {
		d := copyTo(t)
		os.Remove(filepath.Join(d, node.StateFileName))
		refusal(t, d, node.StateFileName)
	})
	t.Run("state file garbage", func(t *testing.T) {
		d := copyTo(t)
		os.WriteFile(filepath.Join(d, node.StateFileName), []byte("nonsense"), 0o600)
		refusal(t, d, node.StateFileName)
	})
	t.Run("watermark beyond the log", func(t *testing.T) {
		d := copyTo(t)
		if err := node.SetState(d, func(s *node.DirState) { s.Durable += 3 }); err != nil {
			t.Fatal(err)
		}
		refusal(t, d, ".wal")
	})
	t.Run("recover then start", func(t *testing.T) {
		d := copyTo(t)
		os.Remove(filepath.Join(d, "wal", node.WALMetaFile))
		refusal(t, d, node.WALMetaFile)
		did, err := node.Recover(d, node.RecoverOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(strings.Join(did, "\n"), "dropped the log") {
			t.Fatalf("recover said %q", did)
		}
		ts := startServer(t, fastConfig(d))
		if tok := grantN(t, ts, "b", 1); tok <= 5 {
			t.Fatalf("token after recover %d", tok)
		}
	})
	t.Run("recover without a floor needs --min-token", func(t *testing.T) {
		d := copyTo(t)
		os.Remove(filepath.Join(d, node.StateFileName))
		if _, err := node.Recover(d, node.RecoverOptions{}); err == nil || !strings.Contains(err.Error(), "min-token") {
			t.Fatalf("recover without a floor: %v", err)
		}
		if _, err := node.Recover(d, node.RecoverOptions{MinToken: 100}); err != nil {
			t.Fatal(err)
		}
		ts := startServer(t, fastConfig(d))
		if tok := grantN(t, ts, "b", 1); tok != 101 {
			t.Fatalf("token after recover --min-token 100: %d", tok)
		}
	})
}

// A data dir from before the state file (a log without checksums) starts
// and gains the file; its old entries are read as they are.
func TestLegacyDataDirStarts(t *testing.T) {
	dir := t.TempDir()
	ts := startServer(t, fastConfig(dir))
	last := grantN(t, ts, "a", 4)
	ts.stop()
	// Rewrite the log's entries without checksums, as an older server
	// wrote them, and drop the state file.
	lastIdx, err := node.RewriteWithoutChecksums(dir)
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(dir, node.StateFileName))
	ts = startServer(t, fastConfig(dir))
	if tok := grantN(t, ts, "b", 1); tok != last+1 {
		t.Fatalf("token on a legacy dir %d, want %d", tok, last+1)
	}
	if s := liveState(t, dir); s.CRCFrom != lastIdx+1 {
		t.Fatalf("legacy state %+v, want CRCFrom %d", s, lastIdx+1)
	}
}

func TestRecoverRefusesAFloorNearTheEnd(t *testing.T) {
	if _, err := node.Recover(t.TempDir(), node.RecoverOptions{MinToken: node.MaxFloor + 1}); err == nil {
		t.Fatal("a floor near the end of the token space was accepted")
	}
}

func TestMissingWALDirRefused(t *testing.T) {
	dir := t.TempDir()
	ts := startServer(t, fastConfig(dir))
	grantN(t, ts, "a", 2)
	ts.stop()
	os.RemoveAll(filepath.Join(dir, "wal"))
	refusal(t, dir, filepath.Join(dir, "wal")+":")
}

// A damaged newest snapshot refuses the start; recover sets it aside and
// the next token is still above every token issued.
func TestDamagedSnapshotRefusedAndRecovered(t *testing.T) {
	dir := t.TempDir()
	cfg := fastConfig(dir)
	cfg.SnapshotThreshold, cfg.TrailingLogs, cfg.SnapshotInterval = 16, 4, 5*time.Millisecond
	ts := startServer(t, cfg)
	var last uint64
	deadline := time.Now().Add(20 * time.Second)
	for {
		last = grantN(t, ts, fmt.Sprintf("a%d", last), 20)
		if snaps, _ := os.ReadDir(filepath.Join(dir, "snapshots")); len(snaps) >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no two snapshots")
		}
	}
	ts.stop()
	fss, err := raft.NewFileSnapshotStoreWithLogger(dir, 2, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	list, err := fss.List()
	if err != nil || len(list) < 2 {
		t.Fatalf("snapshots %v %v", list, err)
	}
	newest := list[0].ID
	state := filepath.Join(dir, "snapshots", newest, "state.bin")
	b, err := os.ReadFile(state)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff
	os.WriteFile(state, b, 0o600)
	refusal(t, dir, filepath.Join("snapshots", newest))
	did, err := node.Recover(dir, node.RecoverOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("recover:\n%s", strings.Join(did, "\n"))
	if !strings.Contains(strings.Join(did, "\n"), "snapshot "+newest+" is damaged") {
		t.Fatalf("recover said %q", did)
	}
	ts = startServer(t, cfg)
	if tok := grantN(t, ts, "b", 1); tok <= last {
		t.Fatalf("token after recover %d, not above %d", tok, last)
	}
}

// The etcd engine's refusal says to run recover on a single node, so
// recover mends an etcd data dir: it cannot read that engine's log, so
// it moves the log and the snapshots aside and records the token floor;
// the next start serves empty, every token above the ones issued.
func TestRecoverEtcdDataDir(t *testing.T) {
	dir := t.TempDir()
	cfg := fastConfig(dir)
	cfg.Engine = node.EngineEtcd
	ts := startServer(t, cfg)
	last := grantN(t, ts, "a", 5)
	ts.stop()
	segs, err := filepath.Glob(filepath.Join(dir, "wal", "*.wal"))
	if err != nil || len(segs) == 0 {
		t.Fatalf("segments %v %v", segs, err)
	}
	for _, s := range segs {
		os.Remove(s)
	}
	s, err := server.New(cfg)
	if err == nil {
		s.Close()
		t.Fatal("started without its log segments")
	}
	if !strings.Contains(err.Error(), "fencelock recover --data "+dir) {
		t.Fatalf("refusal %v does not say to run recover", err)
	}

	did, err := node.Recover(dir, node.RecoverOptions{})
	if err != nil {
		t.Fatalf("recover on an etcd data dir: %v", err)
	}
	said := strings.Join(did, "\n")
	for _, want := range []string{"etcd engine", "every lease is lost", "recorded token floor"} {
		if !strings.Contains(said, want) {
			t.Fatalf("recover said %q, want %q", said, want)
		}
	}
	aside, err := filepath.Glob(filepath.Join(dir, "damaged-*", "wal"))
	if err != nil || len(aside) != 1 {
		t.Fatalf("the log moved aside: %v %v", aside, err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "fencelock.engine")); err != nil || string(b) != "etcd\n" {
		t.Fatalf("engine file after recover %q %v", b, err)
	}
	floor := liveState(t, dir).PendingFloor
	ts = startServer(t, cfg)
	if tok := grantN(t, ts, "b", 1); tok <= last || tok != floor+1 {
		t.Fatalf("token after recover %d; %d were issued, floor %d", tok, last, floor)
	}
}
