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
// first start it issues above it; at later starts the flag changes
// nothing.
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
	cfg.TokenFloor = 9000
	ts = startServer(t, cfg)
	if tok := grantN(t, ts, "b", 1); tok != 1002 {
		t.Fatalf("a floor given to a data dir with state moved the tokens: %d", tok)
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
