package hashicorp

import (
	"sync"

	"github.com/hashicorp/raft"
)

// hashicorp/raft's pipelined replication can deadlock, and with it the
// node's shutdown. The leader's replication to a follower runs a sender
// and a decoder (pipelineDecode) over one AppendPipeline. When the
// follower answers an append with Success false (a log that does not
// match, or our guard's refusal) or a newer term, the decoder returns;
// the sender learns it only between sends. If the pipeline's own reader
// has by then read the next answer, it waits for ever to hand it to the
// decoder that is gone, so it takes no further request from the sender,
// whose next AppendEntries waits for ever to hand its request over: the
// sender never gets back to the point where it would notice the decoder
// left and close the pipeline, and raft's Shutdown waits on that
// goroutine. (Seen as a server test hanging in Shutdown until go test's
// 10-minute timeout; the same hang is reported elsewhere, e.g.
// grafana/pyroscope#5518.)
//
// relayPipeline cuts the cycle at the handing over of answers: a
// goroutine of its own takes every answer from the pipeline at once and
// holds it until the decoder reads it, so the pipeline's reader never
// waits on the decoder. Answers reach the decoder in the order they came.
// What it holds is bounded by what the sender has in flight: the sender
// waits for the reader to take each request, and the reader takes the
// next only after the answer to the last.
type relayPipeline struct {
	raft.AppendPipeline
	out  chan raft.AppendFuture
	stop chan struct{}
	done chan struct{}
	once sync.Once
}

func relay(p raft.AppendPipeline) *relayPipeline {
	r := &relayPipeline{
		AppendPipeline: p,
		out:            make(chan raft.AppendFuture),
		stop:           make(chan struct{}),
		done:           make(chan struct{}),
	}
	go r.run(p.Consumer())
	return r
}

func (r *relayPipeline) run(in <-chan raft.AppendFuture) {
	defer close(r.done)
	var held []raft.AppendFuture
	for {
		var out chan raft.AppendFuture
		var next raft.AppendFuture
		if len(held) > 0 {
			out, next = r.out, held[0]
		}
		select {
		case f := <-in:
			held = append(held, f)
		case out <- next:
			held[0] = nil
			held = held[1:]
		case <-r.stop:
			return
		}
	}
}

// Consumer is the decoder's side of the relay.
func (r *relayPipeline) Consumer() <-chan raft.AppendFuture { return r.out }

// Close closes the pipeline, then ends the relay.
func (r *relayPipeline) Close() error {
	err := r.AppendPipeline.Close()
	r.once.Do(func() { close(r.stop) })
	<-r.done
	return err
}

// AppendEntriesPipeline relays the pipeline's answers (relayPipeline).
func (t *watchedTransport) AppendEntriesPipeline(id raft.ServerID, target raft.ServerAddress) (raft.AppendPipeline, error) {
	p, err := t.Transport.AppendEntriesPipeline(id, target)
	if err != nil {
		return nil, err
	}
	return relay(p), nil
}
