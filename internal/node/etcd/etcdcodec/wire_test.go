package etcdcodec

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/fencelock/fencelock/internal/node"
	"github.com/fencelock/fencelock/internal/node/raftport"
)

func TestEtcdWireRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	msgs := []*raftpb.Message{
		{Type: raftpb.MsgApp.Enum(), From: proto.Uint64(1), To: proto.Uint64(2), Term: proto.Uint64(3),
			Entries: []*raftpb.Entry{Entry(4, 3, raftpb.EntryNormal, []byte("x"))}},
		{Type: raftpb.MsgHeartbeat.Enum(), From: proto.Uint64(1), To: proto.Uint64(2)},
	}
	for _, m := range msgs {
		if err := WriteMsg(w, m); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(bytes.NewReader(buf.Bytes()))
	for i, want := range msgs {
		got, err := ReadMsg(r, 1)
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if !proto.Equal(got, want) {
			t.Fatalf("message %d: got %v, want %v", i, got, want)
		}
	}
	if _, err := ReadMsg(r, 1); !errors.Is(err, io.EOF) {
		t.Fatalf("after the last frame: %v, want EOF", err)
	}
}

// A message from another sender than the connection's, a torn frame and
// an oversized length are refused.
func TestEtcdWireRefusals(t *testing.T) {
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	if err := WriteMsg(w, &raftpb.Message{Type: raftpb.MsgHeartbeat.Enum(), From: proto.Uint64(9)}); err != nil {
		t.Fatal(err)
	}
	w.Flush()
	frame := buf.Bytes()
	if _, err := ReadMsg(bufio.NewReader(bytes.NewReader(frame)), 1); err == nil {
		t.Fatal("a message from another node was accepted")
	}
	if _, err := ReadMsg(bufio.NewReader(bytes.NewReader(frame[:len(frame)-1])), 9); err == nil {
		t.Fatal("a torn frame was accepted")
	}
	if _, err := ReadMsg(bufio.NewReader(bytes.NewReader([]byte{0xff, 0xff, 0xff, 0xff})), 0); err == nil {
		t.Fatal("an oversized frame was accepted")
	}
}

// etcdSnapMsg is a MsgSnap from 1 to 2 carrying data.
func etcdSnapMsg(data []byte) *raftpb.Message {
	return &raftpb.Message{Type: raftpb.MsgSnap.Enum(), From: proto.Uint64(1), To: proto.Uint64(2), Term: proto.Uint64(3),
		Snapshot: &raftpb.Snapshot{Data: data, Metadata: &raftpb.SnapshotMetadata{Index: proto.Uint64(40), Term: proto.Uint64(3),
			ConfState: &raftpb.ConfState{Voters: []uint64{1, 2}}}}}
}

// A snapshot larger than a frame travels in chunks and comes back
// whole; a smaller one in one frame, as before chunks; the message
// raft handed the writer is left as it was.
func TestEtcdWireChunksASnapshot(t *testing.T) {
	big := bytes.Repeat([]byte("0123456789abcdef"), (etcdMaxFrame+3*etcdSnapChunk/2)/16)
	for _, data := range [][]byte{big, []byte("small")} {
		var buf bytes.Buffer
		w := bufio.NewWriter(&buf)
		m := etcdSnapMsg(data)
		want := proto.Clone(m).(*raftpb.Message)
		hb := &raftpb.Message{Type: raftpb.MsgHeartbeat.Enum(), From: proto.Uint64(1), To: proto.Uint64(2), Term: proto.Uint64(3)}
		for _, msg := range []*raftpb.Message{m, hb} {
			if err := WriteMsg(w, msg); err != nil {
				t.Fatal(err)
			}
		}
		w.Flush()
		if !proto.Equal(m, want) {
			t.Fatal("the writer changed raft's message")
		}
		if len(data) == len(big) && buf.Len() < len(big) {
			t.Fatalf("%d bytes written for a snapshot of %d", buf.Len(), len(big))
		}
		r := bufio.NewReader(bytes.NewReader(buf.Bytes()))
		for _, w := range []*raftpb.Message{want, hb} {
			got, err := ReadMsg(r, 1)
			if err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(got, w) {
				t.Fatalf("read %v, want %v", got.GetType(), w.GetType())
			}
		}
	}
}

// The reader refuses, without reading them: a frame declaring more than
// etcdMaxFrame (the finding's 1 GiB among them), chunks adding up to
// more than a snapshot may hold, and chunks followed by anything but a
// MsgSnap without data of its own.
func TestEtcdWireRefusesWhatNoMemberSends(t *testing.T) {
	hb, err := proto.Marshal(&raftpb.Message{Type: raftpb.MsgHeartbeat.Enum(), From: proto.Uint64(1)})
	if err != nil {
		t.Fatal(err)
	}
	frame := func(head uint32, b []byte) []byte { return append(binary.BigEndian.AppendUint32(nil, head), b...) }
	for name, b := range map[string][]byte{
		"a frame declaring 1 GiB":           binary.BigEndian.AppendUint32(nil, 1<<30),
		"a frame declaring 4 MiB and a bit": binary.BigEndian.AppendUint32(nil, etcdMaxFrame+1),
		"a chunk declaring 1 GiB":           binary.BigEndian.AppendUint32(nil, etcdChunkBit|1<<30),
		"chunks, then a heartbeat":          append(frame(etcdChunkBit|3, []byte("abc")), frame(uint32(len(hb)), hb)...),
	} {
		if _, err := ReadMsg(bufio.NewReader(bytes.NewReader(b)), 0); err == nil || errors.Is(err, io.EOF) {
			t.Errorf("%s: %v, want a refusal", name, err)
		}
	}
	// A chunk that takes a snapshot past raftport.MaxSnapshot: refused at
	// its header, nothing of it read.
	p := &etcdParser{stage: 3, snap: raftport.MaxSnapshot - 10}
	if _, _, _, err := p.Parse(binary.BigEndian.AppendUint32(nil, etcdChunkBit|11)); err == nil {
		t.Error("the parser took a chunk past a snapshot's bound")
	}
}

// The raft port's parser (etcdParser) ends each message where the
// reader does: the hello, each frame, a snapshot's chunks with its
// MsgSnap; its chunks are streamed, not held; whatever the pieces the
// bytes arrive in.
func TestEtcdParserFollowsTheWire(t *testing.T) {
	var buf bytes.Buffer
	buf.Write(Preamble)
	buf.Write(Hello(node.Peer{ID: "n1", RaftAddr: "127.0.0.1:7000"}))
	ends := []int{buf.Len()}
	w := bufio.NewWriter(&buf)
	data := bytes.Repeat([]byte("s"), etcdMaxFrame+etcdSnapChunk/3)
	for _, m := range []*raftpb.Message{
		{Type: raftpb.MsgHeartbeat.Enum(), From: proto.Uint64(1), Term: proto.Uint64(3)},
		etcdSnapMsg(data),
		{Type: raftpb.MsgApp.Enum(), From: proto.Uint64(1), Term: proto.Uint64(3), Entries: []*raftpb.Entry{Entry(4, 3, raftpb.EntryNormal, []byte("x"))}},
		etcdSnapMsg([]byte("small")),
	} {
		if err := WriteMsg(w, m); err != nil {
			t.Fatal(err)
		}
		w.Flush()
		ends = append(ends, buf.Len())
	}
	b := buf.Bytes()
	rnd := rand.New(rand.NewPCG(7, 8))
	for range 10 {
		p := &etcdParser{}
		var got []int
		streamed, off := 0, 0
		for off < len(b) {
			piece := b[off:min(off+1+rnd.IntN(100_000), len(b))]
			for len(piece) > 0 {
				took, s, end, err := p.Parse(piece)
				if err != nil {
					t.Fatal(err)
				}
				off += took
				streamed += s
				piece = piece[took:]
				if end {
					got = append(got, off)
				}
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(ends) || streamed != len(data) {
			t.Fatalf("messages ended at %v, streamed %d; want %v and %d", got, streamed, ends, len(data))
		}
	}
	// Not the preamble: taken, for the transport to refuse and name.
	p := &etcdParser{}
	if took, _, end, err := p.Parse([]byte("GET / HTTP/1.1\r\n\r\n")); err != nil || end || took != 18 {
		t.Fatalf("another protocol's bytes: took %d, end %v, %v", took, end, err)
	}
}
