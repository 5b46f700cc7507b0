package hashicorp

import (
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/node"
	"github.com/fencelock/fencelock/internal/node/raftport"
)

// What a member-looking process sends the hashicorp engine's raft port
// (issue 41): a node on a raft port of loopback without a credential
// (InsecureRaft), where any process is taken for a member.

// openPortNode opens a node alone with a raft port on loopback, lim its
// budgets.
func openPortNode(t *testing.T, lim raftport.Limits) *Node {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := node.Config{NodeID: "n1", DataDir: t.TempDir(), RaftAddr: ln.Addr().String(), Listener: ln, InsecureRaft: true,
		RaftPort: lim, Logger: slog.New(slog.DiscardHandler), HeartbeatTimeout: 50 * time.Millisecond,
		ElectionTimeout: 50 * time.Millisecond, LeaderLeaseTimeout: 50 * time.Millisecond,
		SnapshotThreshold: node.DefaultSnapshotThreshold, SnapshotInterval: node.DefaultSnapshotInterval, TrailingLogs: 10240}
	n, err := Open(cfg, fsm.New(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// waitClosedByPeer waits until the other end closes c (a deadline: a
// failure of the test, not a decision).
func waitClosedByPeer(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := io.Copy(io.Discard, c)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("the raft port kept a connection it should have closed")
	}
}

// The finding: an AppendEntries declaring a string of 1 GiB, half sent,
// grew msgpack's buffer 256 KiB at a time (588 MB at its peak, 279 MB
// held, 13 s of CPU). Now the declaration is refused before a byte of
// the string is read; an RPC half sent is cut a message's time after
// its first byte; an InstallSnapshot declaring more than a snapshot may
// be is refused at its header; each counted.
func TestHashicorpPortCutsHalfSentRPCs(t *testing.T) {
	n := openPortNode(t, raftport.Limits{MessageTimeout: 100 * time.Millisecond})
	hdr := raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("n2"), Addr: []byte("127.0.0.1:1")}
	snapHead := hcEncode(t, hcRPCInstallSnapshot, &raft.InstallSnapshotRequest{RPCHeader: hdr, Term: 1, Size: 4 << 30})
	for _, attack := range []struct {
		name  string
		bytes []byte
	}{
		// {"Data": str32 of 1 GiB}, and 1 MiB of it.
		{"a string of 1 GiB", append([]byte{hcRPCAppendEntries, 0x81, 0xa4, 'D', 'a', 't', 'a', 0xdb, 0x40, 0, 0, 0}, make([]byte, 1<<20)...)},
		{"an append half sent", hcEncode(t, hcRPCAppendEntries, &raft.AppendEntriesRequest{RPCHeader: hdr, Term: 1,
			Entries: []*raft.Log{{Index: 1, Term: 1, Data: make([]byte, 100<<10)}}})[:50<<10]},
		{"an InstallSnapshot of 4 GiB", snapHead},
	} {
		cut := n.RaftPortStats().MessagesCut
		c, err := net.Dial("tcp", n.Addr())
		if err != nil {
			t.Fatal(err)
		}
		c.Write(attack.bytes)
		waitClosedByPeer(t, c)
		c.Close()
		if got := n.RaftPortStats().MessagesCut; got != cut+1 {
			t.Errorf("%s: messages cut %d, want %d", attack.name, got, cut+1)
		}
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		_, err := n.Propose(acquireCmd(t, "after"), 5*time.Second)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a proposal after the attacks: %v", err)
		}
	}
}

func acquireCmd(t *testing.T, key string) []byte {
	t.Helper()
	b, err := fsm.Encode(fsm.Command{Op: fsm.OpAcquire, Key: key, Holder: "h", TTL: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return b
}
