package hashicorp

import (
	"io"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fencelock/fencelock/internal/node"
)

// The deadlock relayPipeline cuts, with raft's own network pipeline over
// loopback: the follower refuses each append (Success false), the decoder
// reads one answer and leaves, as raft's pipelineDecode does, and the
// sender goes on sending, as raft's sender does until it looks again.
// Straight on raft's pipeline the third send waits for ever (its reader
// holds the second answer for a decoder that is gone); relayed, every
// send returns and the pipeline closes.
func TestPipelineAnswersDoNotWaitForAGoneDecoder(t *testing.T) {
	a, err := raft.NewTCPTransport("127.0.0.1:0", nil, 2, 5*time.Second, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := raft.NewTCPTransport("127.0.0.1:0", nil, 2, 5*time.Second, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case rpc := <-b.Consumer():
				rpc.Respond(&raft.AppendEntriesResponse{Term: 1, Success: false}, nil)
			case <-stop:
				return
			}
		}
	}()
	wt := &watchedTransport{Transport: a, w: node.NewPeerWatch(time.Now)}
	p, err := wt.AppendEntriesPipeline("b", b.LocalAddr())
	if err != nil {
		t.Fatal(err)
	}
	sent := make(chan error, 1)
	go func() {
		for range 4 {
			if _, err := p.AppendEntries(&raft.AppendEntriesRequest{Term: 1}, &raft.AppendEntriesResponse{}); err != nil {
				sent <- err
				return
			}
		}
		sent <- nil
	}()
	bound := time.After(10 * time.Second) // a bound on a hang, not a timing
	select {
	case f := <-p.Consumer():
		if f.Response().Success {
			t.Fatal("the follower refused every append")
		}
	case <-bound:
		t.Fatal("no answer to the first append")
	}
	select {
	case err := <-sent:
		if err != nil {
			t.Fatal(err)
		}
	case <-bound:
		t.Fatal("the sender waits for ever once the decoder left: the pipeline deadlocked")
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
}
