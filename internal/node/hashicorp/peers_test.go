package hashicorp

import (
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fencelock/fencelock/internal/node"
)

// TestWatchedTransportKeepsPreVote: raft turns pre-vote on only for a
// transport that has it, so the wrapper must keep it, and Close must
// reach the wrapped transport.
func TestWatchedTransportKeepsPreVote(t *testing.T) {
	_, mem := raft.NewInmemTransport("a")
	wt := watchTransport(mem, node.NewPeerWatch(time.Now))
	if _, ok := wt.(raft.WithPreVote); !ok {
		t.Fatal("the wrapped in-memory transport lost pre-vote")
	}
	if _, ok := wt.(raft.WithClose); !ok {
		t.Fatal("the wrapped transport cannot be closed")
	}
	if err := wt.(raft.WithClose).Close(); err != nil {
		t.Fatal(err)
	}
	type plain struct{ raft.Transport }
	if _, ok := watchTransport(plain{mem}, node.NewPeerWatch(time.Now)).(raft.WithPreVote); ok {
		t.Fatal("pre-vote claimed for a transport without it")
	}
}
