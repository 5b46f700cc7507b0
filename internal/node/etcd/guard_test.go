package etcd

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"log/slog"
	"math"
	"net"
	"sync"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/node"
	"github.com/fencelock/fencelock/internal/node/etcd/etcdcodec"
	"github.com/fencelock/fencelock/internal/node/raftport"
)

// What a member-looking process sends the etcd engine (issue 41):
// clusters on raft ports of loopback without a credential
// (InsecureRaft), where any process is taken for the member its hello
// names.

// sendAs writes msgs to name's raft port as the member as.
func (cl *etcdCluster) sendAs(name, as string, msgs ...*raftpb.Message) net.Conn {
	cl.t.Helper()
	c, err := cl.peerConn(name, nil, as)
	if err != nil {
		cl.t.Fatal(err)
	}
	cl.t.Cleanup(func() { c.Close() })
	w := bufio.NewWriter(c)
	for _, m := range msgs {
		if err := etcdcodec.WriteMsg(w, m); err != nil {
			cl.t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		cl.t.Fatal(err)
	}
	return c
}

// running says whether name's engine still runs: raft's goroutine has
// not stopped on its own.
func (cl *etcdCluster) running(name string) bool {
	select {
	case <-cl.ms[name].n.core.dead:
		return false
	default:
		return true
	}
}

// The finding: a damaged MsgSnap stopped the etcd engine of the node it
// reached until the node was restarted. A follower restarted behind the
// leader's compacted log is sent, by a process naming another member,
// snapshots damaged in each way install or raft would stop on, far
// ahead of its log: it refuses each and says so, keeps running, and
// catches up from the leader's own snapshot with every acknowledged
// grant.
func TestEtcdTransportRefusesADamagedSnapshot(t *testing.T) {
	var logs syncWriter
	cl := &etcdCluster{t: t, ms: map[string]*etcdMember{}, edit: func(c *node.Config) {
		c.TrailingLogs = 0
		if c.NodeID == "c" {
			c.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
		}
	}}
	cl.boot([]string{"a", "b", "c"})
	for i := range 5 {
		cl.grant(fmt.Sprint("k", i))
	}
	if cl.leader() == "c" {
		if err := cl.ms["c"].r.TransferLeadership(); err != nil {
			t.Fatal(err)
		}
		cl.leader("c")
	}
	cl.kill("c")
	for i := range 10 {
		cl.grant(fmt.Sprint("j", i), "c")
	}
	l := cl.leader("c")
	if err := cl.ms[l].n.Snapshot(); err != nil {
		t.Fatal(err)
	}
	cl.start("c", false)
	as := "a"
	if l == "a" {
		as = "b"
	}

	cs := &raftpb.ConfState{Voters: []uint64{etcdcodec.ID("a"), etcdcodec.ID("b"), etcdcodec.ID("c")}}
	names := map[uint64]node.Peer{}
	for _, n := range []string{"a", "b", "c"} {
		names[etcdcodec.ID(n)] = node.Peer{ID: n, RaftAddr: cl.addr(n)}
	}
	head, err := etcdcodec.SnapHeader(cs, names)
	if err != nil {
		t.Fatal(err)
	}
	good, err := fsm.New(nil).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	bad := append([]byte{}, good...)
	bad[len(bad)/2] ^= 0xff
	term := cl.ms[l].r.Status().Term
	snap := func(cs *raftpb.ConfState, snapTerm uint64, data []byte) *raftpb.Message {
		return &raftpb.Message{Type: raftpb.MsgSnap.Enum(), From: proto.Uint64(etcdcodec.ID(as)), To: proto.Uint64(etcdcodec.ID("c")),
			Term: proto.Uint64(term), Snapshot: &raftpb.Snapshot{Data: data, Metadata: &raftpb.SnapshotMetadata{
				Index: proto.Uint64(1 << 40), Term: proto.Uint64(snapTerm), ConfState: cs}}}
	}
	damaged := []*raftpb.Message{
		snap(cs, term, []byte("not a snapshot")),
		snap(cs, term, append(append([]byte{}, head...), bad...)),                                                             // the state machine's bytes
		snap(cs, term, append(append([]byte{}, head[:len(head)-1]...), good...)),                                              // the names' checksum
		snap(&raftpb.ConfState{Voters: []uint64{etcdcodec.ID("c"), 12345}}, term, append(append([]byte{}, head...), good...)), // a member with no name
		snap(&raftpb.ConfState{Voters: []uint64{etcdcodec.ID("c")}, Learners: []uint64{etcdcodec.ID("c")}}, term, append(append([]byte{}, head...), good...)),
		snap(cs, term+1, append(append([]byte{}, head...), good...)), // a snapshot's term above its message's
	}
	cl.sendAs("c", as, damaged...)

	cl.grant("after the damaged snapshots", "c")
	cl.awaitApplied("c", cl.acked[len(cl.acked)-1].index)
	if !cl.running("c") {
		t.Fatalf("c's engine stopped: %v", cl.ms["c"].n.core.halted())
	}
	if got := cl.ms["c"].n.core.snapIndex.Load(); got == 0 || got >= 1<<40 {
		t.Fatalf("c installed the snapshot at %d, want the leader's", got)
	}
	cl.checkAcked()
	t.Logf("c logged:\n%s", logs.String())
	if cl.ms["c"].n.tr.Refused() < int64(len(damaged)) {
		t.Errorf("c refused %d messages, want the %d damaged snapshots; logged:\n%s", cl.ms["c"].n.tr.Refused(), len(damaged), logs.String())
	}
}

// The finding: a raft message declaring 1 GiB, half sent, made the etcd
// engine's reader allocate the whole length and hold it while the
// connection stayed (no deadline after the hello). Now a frame declaring
// more than a frame may hold is refused at its length, and one half sent
// is cut a message's time after its first byte; both counted, and the
// node goes on.
func TestEtcdTransportCutsAHalfSentFrame(t *testing.T) {
	cl := &etcdCluster{t: t, ms: map[string]*etcdMember{}, edit: func(c *node.Config) {
		c.RaftPort.MessageTimeout = 100 * time.Millisecond
	}}
	cl.boot([]string{"a", "b", "c"})
	cl.grant("k")
	victim := cl.follower()
	other := cl.follower(victim) // a follower sends the victim nothing: its connection is not replaced
	cut := cl.ms[victim].n.RaftPortStats().MessagesCut

	c, err := cl.peerConn(victim, nil, other)
	if err != nil {
		t.Fatal(err)
	}
	c.Write(append(binary.BigEndian.AppendUint32(nil, 1<<30), make([]byte, 1<<20)...))
	closedByPeer(t, c)
	c.Close()

	c, err = cl.peerConn(victim, nil, other)
	if err != nil {
		t.Fatal(err)
	}
	c.Write(append(binary.BigEndian.AppendUint32(nil, 1<<20), make([]byte, 1<<10)...))
	closedByPeer(t, c)
	c.Close()

	if got := cl.ms[victim].n.RaftPortStats().MessagesCut; got != cut+2 {
		t.Errorf("messages cut on %s: %d, want %d", victim, got, cut+2)
	}
	cl.grant("after the half-sent frames")
	cl.checkAcked()
}

// etcdcodec.CheckMsg's refusals, message by message: terms the guard
// refuses, terms inside a message above its own, and messages of term 0,
// which raft takes no term from.
func TestEtcdCheckMsg(t *testing.T) {
	g := raftport.NewTermGuard(slog.New(slog.DiscardHandler), nil)
	msg := func(typ raftpb.MessageType, term, logTerm uint64, ents ...uint64) *raftpb.Message {
		m := &raftpb.Message{Type: typ.Enum(), From: proto.Uint64(1), To: proto.Uint64(2), Term: proto.Uint64(term), LogTerm: proto.Uint64(logTerm)}
		for i, et := range ents {
			m.Entries = append(m.Entries, etcdcodec.Entry(uint64(10+i), et, raftpb.EntryNormal, []byte("x")))
		}
		return m
	}
	for _, c := range []struct {
		name string
		m    *raftpb.Message
		ok   bool
	}{
		{"a heartbeat of 2^64-1", msg(raftpb.MsgHeartbeat, math.MaxUint64, 0), false},
		{"a vote of 2^62+1", msg(raftpb.MsgVote, raftport.MaxTerm+1, 5), false},
		{"a pre-vote far ahead", msg(raftpb.MsgPreVote, 5+raftport.TermStep+1, 5), false},
		{"a timeout-now far ahead", msg(raftpb.MsgTimeoutNow, 5+raftport.TermStep+1, 0), false},
		{"an append's answer far ahead", msg(raftpb.MsgAppResp, 5+raftport.TermStep+1, 0), false},
		{"a pre-vote one ahead", msg(raftpb.MsgPreVote, 6, 5), true},
		{"an append", msg(raftpb.MsgApp, 5, 4, 4, 5), true},
		{"an append with an entry of a later term", msg(raftpb.MsgApp, 5, 4, 5, math.MaxUint64), false},
		{"an append whose log term is later", msg(raftpb.MsgApp, 5, 6), false},
		{"a vote whose last log term is later", msg(raftpb.MsgVote, 6, 7), false},
		{"a proposal (term 0)", msg(raftpb.MsgProp, 0, 0, 0), true},
	} {
		err := etcdcodec.CheckMsg(g, c.m, 5, nil)
		if (err == nil) != c.ok {
			t.Errorf("%s: %v, want taken %v", c.name, err, c.ok)
		}
	}
}

// syncWriter is a log sink written by several goroutines.
type syncWriter struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncWriter) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
