package etcd

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

func TestEtcdWireRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	msgs := []*raftpb.Message{
		{Type: raftpb.MsgApp.Enum(), From: proto.Uint64(1), To: proto.Uint64(2), Term: proto.Uint64(3),
			Entries: []*raftpb.Entry{etcdEntry(4, 3, raftpb.EntryNormal, []byte("x"))}},
		{Type: raftpb.MsgHeartbeat.Enum(), From: proto.Uint64(1), To: proto.Uint64(2)},
	}
	for _, m := range msgs {
		if err := etcdWriteMsg(w, m); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(bytes.NewReader(buf.Bytes()))
	for i, want := range msgs {
		got, err := etcdReadMsg(r, 1)
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if !proto.Equal(got, want) {
			t.Fatalf("message %d: got %v, want %v", i, got, want)
		}
	}
	if _, err := etcdReadMsg(r, 1); !errors.Is(err, io.EOF) {
		t.Fatalf("after the last frame: %v, want EOF", err)
	}
}

// A message from another sender than the connection's, a torn frame and
// an oversized length are refused.
func TestEtcdWireRefusals(t *testing.T) {
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	if err := etcdWriteMsg(w, &raftpb.Message{Type: raftpb.MsgHeartbeat.Enum(), From: proto.Uint64(9)}); err != nil {
		t.Fatal(err)
	}
	w.Flush()
	frame := buf.Bytes()
	if _, err := etcdReadMsg(bufio.NewReader(bytes.NewReader(frame)), 1); err == nil {
		t.Fatal("a message from another node was accepted")
	}
	if _, err := etcdReadMsg(bufio.NewReader(bytes.NewReader(frame[:len(frame)-1])), 9); err == nil {
		t.Fatal("a torn frame was accepted")
	}
	if _, err := etcdReadMsg(bufio.NewReader(bytes.NewReader([]byte{0xff, 0xff, 0xff, 0xff})), 0); err == nil {
		t.Fatal("an oversized frame was accepted")
	}
}
