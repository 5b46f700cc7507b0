package node_test

import (
	"strings"
	"testing"

	"github.com/fencelock/fencelock/internal/node"
	"github.com/fencelock/fencelock/internal/server"
)

// Finding 1 of issue 25, its last part: a cluster rebuilt from scratch
// issued tokens from 1 again, below the marks its fences kept, so every
// real holder was refused at every resource. With a token floor at its
// first start it issues above it. At a later start a floor above the
// tokens issued raises them (issue 44: it was silently ignored, so a data
// dir restored from an old backup kept issuing tokens its fences refuse);
// one at or below them changes nothing, so the flag can stay on the
// command line.
func TestTokenFloorAtFirstStart(t *testing.T) {
	dir := t.TempDir()
	cfg := fastConfig(dir)
	cfg.TokenFloor = 1000
	ts := startServer(t, cfg)
	if tok := grantN(t, ts, "a", 1); tok != 1001 {
		t.Fatalf("first token with a floor of 1000: %d", tok)
	}
	ts.stop()
	if st := liveState(t, dir); st.PendingFloor != 0 {
		t.Fatalf("the floor is still pending after it was committed: %+v", st)
	}
	cfg.TokenFloor = 1001
	ts = startServer(t, cfg)
	if tok := grantN(t, ts, "b", 1); tok != 1002 {
		t.Fatalf("a floor at the tokens issued moved them: %d", tok)
	}
	ts.stop()
	if st := liveState(t, dir); st.PendingFloor != 0 {
		t.Fatalf("a floor below the tokens issued was left pending: %+v", st)
	}
	cfg.TokenFloor = 9000
	ts = startServer(t, cfg)
	if tok := grantN(t, ts, "b2", 1); tok != 9001 {
		t.Fatalf("a floor of 9000 given to a data dir with state: next token %d, want 9001", tok)
	}
	ts.stop()
	ts = startServer(t, cfg) // the flag left on the command line
	if tok := grantN(t, ts, "b3", 1); tok != 9002 {
		t.Fatalf("the same floor at the next start moved the tokens again: %d", tok)
	}
	ts.stop()

	mem := fastConfig("")
	mem.TokenFloor = 50
	ts = startServer(t, mem)
	if tok := grantN(t, ts, "c", 1); tok != 51 {
		t.Fatalf("first token in memory with a floor of 50: %d", tok)
	}
	ts.stop()

	bad := fastConfig(t.TempDir())
	bad.TokenFloor = node.MaxFloor + 1
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "TokenFloor") {
		t.Fatalf("a floor above MaxFloor: %v", err)
	}
	if _, err := server.New(bad); err == nil {
		t.Fatal("a server started with a floor above MaxFloor")
	}
}
