package etcd

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// The etcd engine's raft port carries raftpb messages, each a frame:
// a u32 length (big-endian) and the message's protobuf encoding. The
// connection is the raft port (node.RaftPort): plain TCP on
// loopback, or mutual TLS whose peer must hold a node certificate naming
// a member. etcdReadMsg refuses a message whose sender is not the one
// the connection belongs to (its from); the transport, not written yet,
// is to pass the etcdID of the node the peer's certificate names.

// etcdMaxMsg bounds one frame: a snapshot travels as one message, so it
// is the largest snapshot the engine can send (the FSM's own limit is
// smaller).
const etcdMaxMsg = 1 << 30

// etcdWriteMsg writes m as one frame to w (buffered: the caller flushes).
func etcdWriteMsg(w *bufio.Writer, m *raftpb.Message) error {
	b, err := proto.Marshal(m)
	if err != nil {
		return fmt.Errorf("encoding a raft message: %w", err)
	}
	if len(b) > etcdMaxMsg {
		return fmt.Errorf("a raft message of %d bytes is above the limit of %d", len(b), etcdMaxMsg)
	}
	var h [4]byte
	binary.BigEndian.PutUint32(h[:], uint32(len(b)))
	if _, err := w.Write(h[:]); err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// etcdReadMsg reads one frame from r. from, when not 0, is the only
// sender the connection may carry.
func etcdReadMsg(r *bufio.Reader, from uint64) (*raftpb.Message, error) {
	var h [4]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(h[:])
	if n > etcdMaxMsg {
		return nil, fmt.Errorf("a raft frame of %d bytes is above the limit of %d", n, etcdMaxMsg)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, fmt.Errorf("reading a raft frame: %w", io.ErrUnexpectedEOF)
	}
	m := new(raftpb.Message)
	if err := proto.Unmarshal(b, m); err != nil {
		return nil, fmt.Errorf("decoding a raft message: %w", err)
	}
	if from != 0 && m.GetFrom() != from {
		return nil, fmt.Errorf("a raft message from %x on the connection of %x", m.GetFrom(), from)
	}
	return m, nil
}
