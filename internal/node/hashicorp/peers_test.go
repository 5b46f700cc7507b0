package hashicorp

import (
	"fmt"
	"io"
	"net"
	"sync"
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

// TestVoteRetriedOnAConnectionTheVoterClosed: a candidate's transport has
// a pooled connection to a voter that has restarted since (its process
// gone: every connection closed). raft's network transport sends the next
// request on it and fails; the node's transport sends a (pre-)vote once
// more, on a new connection, and is answered.
func TestVoteRetriedOnAConnectionTheVoterClosed(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	var v *voterProcess
	start := func() {
		t.Helper()
		v = startVoter(t, addr)
	}
	restart := func() {
		t.Helper()
		v.kill()
		start()
	}
	start()
	defer func() { v.kill() }()

	own, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	raw := raft.NewNetworkTransport(&testStream{Listener: own}, 2, 5*time.Second, io.Discard)
	defer raw.Close()
	cand := watchTransport(raw, node.NewPeerWatch(time.Now)).(raft.WithPreVote)
	vote := func(tr raft.Transport) error {
		return tr.RequestVote("v", raft.ServerAddress(addr), &raft.RequestVoteRequest{Term: 2}, &raft.RequestVoteResponse{})
	}
	preVote := func() error {
		return cand.RequestPreVote("v", raft.ServerAddress(addr), &raft.RequestPreVoteRequest{Term: 2}, &raft.RequestPreVoteResponse{})
	}

	if err := vote(raw); err != nil { // a pooled connection to the voter
		t.Fatal(err)
	}
	restart()
	if err := vote(raw); err == nil {
		t.Fatal("raft's own transport was answered on the dead connection: the case this test is about is gone")
	}
	if err := vote(raw); err != nil { // pooled again
		t.Fatal(err)
	}
	restart()
	if err := vote(cand.(raft.Transport)); err != nil {
		t.Fatalf("vote after the voter restarted: %v", err)
	}
	restart()
	if err := preVote(); err != nil {
		t.Fatalf("pre-vote after the voter restarted: %v", err)
	}
	if err := vote(cand.(raft.Transport)); err != nil {
		t.Fatal(err)
	}
}

// voterProcess is a raft transport at an address that grants every
// vote, and whose kill closes every connection, as a process's death
// does.
type voterProcess struct {
	tr     *raft.NetworkTransport
	stream *testStream
}

func startVoter(t *testing.T, addr string) *voterProcess {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	s := &testStream{Listener: ln}
	v := &voterProcess{tr: raft.NewNetworkTransport(s, 2, 5*time.Second, io.Discard), stream: s}
	go func() {
		for rpc := range v.tr.Consumer() {
			switch rpc.Command.(type) {
			case *raft.RequestVoteRequest:
				rpc.Respond(&raft.RequestVoteResponse{Granted: true}, nil)
			case *raft.RequestPreVoteRequest:
				rpc.Respond(&raft.RequestPreVoteResponse{Granted: true}, nil)
			default:
				rpc.Respond(nil, fmt.Errorf("unexpected %T", rpc.Command))
			}
		}
	}()
	return v
}

func (v *voterProcess) kill() {
	v.tr.Close()
	v.stream.closeAccepted()
}

// testStream is a raft stream layer over TCP that remembers the
// connections it accepted.
type testStream struct {
	net.Listener
	mu       sync.Mutex
	accepted []net.Conn
}

func (s *testStream) Accept() (net.Conn, error) {
	c, err := s.Listener.Accept()
	if err == nil {
		s.mu.Lock()
		s.accepted = append(s.accepted, c)
		s.mu.Unlock()
	}
	return c, err
}

func (s *testStream) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return net.DialTimeout("tcp", string(addr), timeout)
}

func (s *testStream) closeAccepted() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.accepted {
		c.Close()
	}
	s.accepted = nil
}
