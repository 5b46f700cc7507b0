package server

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/locktable"
	"github.com/fencelock/fencelock/internal/node/raftport"
)

// Nothing a peer sends can wrap a term (issue 41, item 2): a member-
// looking process, one that holds the cluster's secret, sends every node
// a heartbeat and a vote of term 2^64-1, on either engine
// (FENCELOCK_TEST_ENGINE).

// sendTermAttack sends target, as the member from (at fromAddr), a
// heartbeat and a vote request of term, over a connection dial makes:
// hashicorp/raft's own NetworkTransport, or raw etcd-engine frames
// after a hello naming from. What target answers is not looked at: what
// it does with them is for the caller to see.
func sendTermAttack(t *testing.T, target, from *tlsNode, term uint64, dial func(string) (net.Conn, error)) {
	t.Helper()
	if !etcdEngine() {
		trans := raft.NewNetworkTransport(dialStream{Listener: listen(t), dial: dial}, 1, 2*time.Second, io.Discard)
		defer trans.Close()
		hdr := raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(from.id), Addr: []byte(from.node.Addr())}
		to := raft.ServerAddress(target.node.Addr())
		err := trans.AppendEntries(raft.ServerID(target.id), to, &raft.AppendEntriesRequest{RPCHeader: hdr, Term: term}, &raft.AppendEntriesResponse{})
		t.Logf("a heartbeat of term %d to %s: %v", term, target.id, err)
		err = trans.RequestVote(raft.ServerID(target.id), to, &raft.RequestVoteRequest{RPCHeader: hdr, Term: term,
			LastLogIndex: math.MaxUint64, LastLogTerm: term, LeadershipTransfer: true}, &raft.RequestVoteResponse{})
		t.Logf("a vote request of term %d to %s: %v", term, target.id, err)
		return
	}
	c, err := dial(target.node.Addr())
	if err != nil {
		t.Logf("dialing %s: %v", target.id, err)
		return
	}
	defer c.Close()
	fromID, toID := etcdMemberID(from.id), etcdMemberID(target.id)
	w := bufio.NewWriter(c)
	w.Write(etcdHelloBytes(from.id, from.node.Addr()))
	for _, m := range []*raftpb.Message{
		{Type: raftpb.MsgHeartbeat.Enum(), From: proto.Uint64(fromID), To: proto.Uint64(toID), Term: proto.Uint64(term)},
		{Type: raftpb.MsgVote.Enum(), From: proto.Uint64(fromID), To: proto.Uint64(toID), Term: proto.Uint64(term),
			LogTerm: proto.Uint64(term), Index: proto.Uint64(math.MaxUint64 / 2), Context: []byte("CampaignTransfer")},
	} {
		writeEtcdFrame(t, w, m)
	}
	if err := w.Flush(); err != nil {
		t.Logf("writing to %s: %v", target.id, err)
	}
	// Read until the port closes the connection or a moment passed:
	// the frames are read by then.
	c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	io.Copy(io.Discard, c)
}

// etcdMemberID is the etcd engine's member id of a node ID.
func etcdMemberID(id string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(id))
	return h.Sum64()
}

// etcdHelloBytes is the etcd engine's preamble and a hello naming id at
// addr.
func etcdHelloBytes(id, addr string) []byte {
	b := []byte("fencelock-etcd-raft/1\n")
	b = binary.BigEndian.AppendUint16(b, uint16(len(id)))
	b = append(b, id...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(addr)))
	return append(b, addr...)
}

// writeEtcdFrame writes m as the etcd engine frames a message.
func writeEtcdFrame(t *testing.T, w io.Writer, m *raftpb.Message) {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	w.Write(binary.BigEndian.AppendUint32(nil, uint32(len(b))))
	w.Write(b)
}

// restartPortNode starts cfg again on its data dir, its raft address
// and its client address client.
func restartPortNode(t *testing.T, cfg Config, client string) *tlsNode {
	t.Helper()
	var rln, cln net.Listener
	eventually(t, "the addresses of "+cfg.NodeID+" to be free again", func() bool {
		var err error
		if rln == nil {
			rln, _ = net.Listen("tcp", cfg.RaftAddr)
		}
		if rln != nil && cln == nil {
			cln, err = net.Listen("tcp", client)
		}
		return err == nil && cln != nil
	})
	cfg.raftListener = rln
	return serveTLSNode(t, cfg, cln)
}

// The finding: a heartbeat or vote of term 2^64-1 from a member-looking
// process ends the cluster for good on both engines (the term wraps; no
// leader is elected again, even after every node restarts). Now every
// node refuses the term and says so; the leader is then killed, another
// is elected and takes writes, and after every node restarts on its
// data a leader is elected again and takes writes.
func TestRaftPortATermOfTwoToTheSixtyFourCannotWrap(t *testing.T) {
	var logs syncLog
	var cfgs []Config
	nodes := startPortCluster(t, 3, func(cfg *Config) {
		cfg.DataDir = t.TempDir()
		cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
		cfgs = append(cfgs, *cfg)
	})
	acquireOnLeaderHTTP(t, nodes, "k", "a")
	l := tlsLeader(t, nodes)
	// 2^64-1 wraps; 2^62 is the highest term a peer may send at all;
	// 2^40 is below it but far more than a step ahead of the cluster's
	// (a node's term would have to stand still for 2^16 s).
	for _, term := range []uint64{math.MaxUint64, raftport.MaxTerm, 1 << 40} {
		for _, n := range nodes {
			from := l
			if n == l {
				from = followerOf(nodes, l)
			}
			sendTermAttack(t, n, from, term, secretDial(t, *testSecret, from.id, true))
		}
	}
	for _, n := range nodes {
		// Two messages (a heartbeat and a vote) of each of three terms.
		// (On the etcd engine the frames were sent without an answer to
		// wait for: they are counted once the port has read them, and
		// raft never sees a refused one.)
		eventually(t, n.id+" to count 6 messages refused", func() bool { return n.node.RaftPortStats().MessagesRefused >= 6 })
		if term := n.node.Status().Term; term > 1<<32 {
			t.Errorf("%s took the term: now %d", n.id, term)
		}
	}
	if got := logs.String(); !strings.Contains(got, "refused before raft took it") || !strings.Contains(got, "18446744073709551615") {
		t.Errorf("no node logged the refusal; logged:\n%s", got)
	}

	// A member may still move a term ahead, by a bounded step: the
	// holder of the secret can disturb elections, never end them.
	l = tlsLeader(t, nodes)
	f := followerOf(nodes, l)
	step := f.node.Status().Term + raftport.TermStep
	sendTermAttack(t, f, l, step, secretDial(t, *testSecret, l.id, true))
	// The etcd engine's frames get no answer: the term moves once raft
	// has stepped them, which a loaded machine may take its time over.
	eventually(t, f.id+" to take the term a step ahead", func() bool { return f.node.Status().Term >= step })
	if term := f.node.Status().Term; term < step || term >= step+raftport.TermStep {
		t.Errorf("%s, sent a term a step ahead (%d): now at %d", f.id, step, term)
	}

	l = tlsLeader(t, nodes)
	l.stop()
	killed := time.Now()
	var rest []*tlsNode
	for _, n := range nodes {
		if n != l {
			rest = append(rest, n)
		}
	}
	acquireOnLeaderHTTP(t, rest, "after-the-kill", "b")
	t.Logf("a write acknowledged %v after the leader was stopped", time.Since(killed).Round(time.Millisecond))

	for _, n := range rest {
		n.stop()
	}
	var again []*tlsNode
	for i, c := range cfgs {
		again = append(again, restartPortNode(t, c, nodes[i].addr))
	}
	acquireOnLeaderHTTP(t, again, "after-the-restart", "c")
	for _, n := range again {
		eventually(t, n.id+" to apply the write after the restart", func() bool { return holdsLease(n, "after-the-restart", "c", 3) })
	}
}

// A follower down while the leader compacts a state larger than a raft
// frame (4 MiB) catches up through the leader's snapshot over the raft
// port, under the port's bounds: on the etcd engine the snapshot
// travels in chunks, on hashicorp its data streams after the
// InstallSnapshot that declares its size. Nothing is cut.
func TestRaftPortCarriesASnapshotLargerThanAFrame(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 5 MB of state through a cluster")
	}
	var cfgs []Config
	nodes := startPortCluster(t, 3, func(cfg *Config) {
		// Small segments of the log: hashicorp's raft-wal keeps the
		// entries of a segment until all of it is compacted away.
		cfg.DataDir, cfg.TrailingLogs, cfg.WALSegmentSize = t.TempDir(), 1, 256<<10
		cfgs = append(cfgs, *cfg)
	})
	acquireOnLeaderHTTP(t, nodes, "k", "a")
	l := tlsLeader(t, nodes)
	fi := 0
	for nodes[fi] == l {
		fi++
	}
	nodes[fi].stop()
	var live []*tlsNode
	for _, x := range nodes {
		if x != nodes[fi] {
			live = append(live, x)
		}
	}
	const n = 4500
	key := func(i int) string { return fmt.Sprintf("%04d-%s", i, strings.Repeat("k", 1000)) }
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 32)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			// A retry after a lost leadership renews the same holder's
			// lease: the state is the same.
			var err error
			for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
				var res *fsm.Result
				res, err = tlsLeader(t, live).ProposeForTest(fsm.Command{Op: fsm.OpAcquire, Key: key(i), Holder: strings.Repeat("h", 256), TTL: locktable.Duration(24 * time.Hour)})
				if err == nil && res.Err != nil {
					err = res.Err
				}
				if err == nil {
					return
				}
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("a write on the leader: %v", err)
	}
	// Both compact their logs: whichever leads must send a snapshot.
	for _, x := range live {
		eventually(t, x.id+" to snapshot what it applied", func() bool {
			_, ok := x.fsm.Get(key(n-1), x.fsm.Now())
			return ok && x.snapshotter(t).Snapshot() == nil
		})
	}
	l = tlsLeader(t, live)
	f := restartPortNode(t, cfgs[fi], nodes[fi].addr)
	eventually(t, f.id+" to catch up from the snapshot", func() bool {
		_, ok := f.fsm.Get(key(n-1), f.fsm.Now())
		return ok
	})
	// The follower holds the leader's snapshot (it had none of its own),
	// larger than a frame.
	size := func(dir string) int64 {
		var n int64
		filepath.WalkDir(filepath.Join(dir, "snapshots"), func(_ string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				if fi, err := d.Info(); err == nil {
					n = max(n, fi.Size())
				}
			}
			return nil
		})
		return n
	}
	if got := size(cfgs[fi].DataDir); got <= 4<<20 {
		t.Errorf("the follower's largest snapshot file: %d bytes; want the leader's, above a frame (4 MiB)", got)
	}
	for _, x := range []*tlsNode{f, l} {
		if st := x.node.RaftPortStats(); st.MessagesCut != 0 {
			t.Errorf("%s cut %d messages", x.id, st.MessagesCut)
		}
	}
}

// sendDamagedSnapshot sends target, as the member from, a snapshot of
// term at an index far ahead of its log whose state machine's bytes are
// damaged (a flipped byte): an InstallSnapshot on hashicorp, a MsgSnap
// on the etcd engine, naming the members of nodes.
func sendDamagedSnapshot(t *testing.T, target, from *tlsNode, nodes []*tlsNode, term uint64, dial func(string) (net.Conn, error)) {
	t.Helper()
	good, err := fsm.New(nil).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	bad := append([]byte{}, good...)
	bad[len(bad)/2] ^= 0xff
	const index = 1 << 40
	if !etcdEngine() {
		var conf raft.Configuration
		for _, n := range nodes {
			conf.Servers = append(conf.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(n.id), Address: raft.ServerAddress(n.node.Addr())})
		}
		trans := raft.NewNetworkTransport(dialStream{Listener: listen(t), dial: dial}, 1, 5*time.Second, io.Discard)
		defer trans.Close()
		hdr := raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(from.id), Addr: []byte(from.node.Addr())}
		err := trans.InstallSnapshot(raft.ServerID(target.id), raft.ServerAddress(target.node.Addr()), &raft.InstallSnapshotRequest{
			RPCHeader: hdr, SnapshotVersion: raft.SnapshotVersionMax, Term: term, LastLogIndex: index, LastLogTerm: term,
			Configuration: raft.EncodeConfiguration(conf), ConfigurationIndex: index, Size: int64(len(bad)),
		}, &raft.InstallSnapshotResponse{}, bytes.NewReader(bad))
		t.Logf("a damaged InstallSnapshot to %s: %v", target.id, err)
		return
	}
	c, err := dial(target.node.Addr())
	if err != nil {
		t.Fatalf("dialing %s: %v", target.id, err)
	}
	defer c.Close()
	var voters []uint64
	for _, n := range nodes {
		voters = append(voters, etcdMemberID(n.id))
	}
	// The engine's snapshot data: its names of the members (empty here:
	// the node knows them from its configuration), then the state
	// machine's bytes.
	w := bufio.NewWriter(c)
	w.Write(etcdHelloBytes(from.id, from.node.Addr()))
	writeEtcdFrame(t, w, &raftpb.Message{Type: raftpb.MsgSnap.Enum(), From: proto.Uint64(etcdMemberID(from.id)),
		To: proto.Uint64(etcdMemberID(target.id)), Term: proto.Uint64(term), Snapshot: &raftpb.Snapshot{
			Data: bad, Metadata: &raftpb.SnapshotMetadata{Index: proto.Uint64(index), Term: proto.Uint64(term),
				ConfState: &raftpb.ConfState{Voters: voters}}}})
	if err := w.Flush(); err != nil {
		t.Logf("writing to %s: %v", target.id, err)
	}
	c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	io.Copy(io.Discard, c)
}

// The finding: a damaged MsgSnap stopped the etcd engine of the node it
// reached until it was restarted. Sent by a member-looking process to a
// follower on either engine, the snapshot is refused as a message: the
// follower keeps running and applying the leader's writes, and after a
// restart on its data it starts and applies again (a damaged snapshot
// kept on disk would be the first it restores).
func TestRaftPortADamagedSnapshotIsRefused(t *testing.T) {
	var logs syncLog
	var cfgs []Config
	nodes := startPortCluster(t, 3, func(cfg *Config) {
		cfg.DataDir = t.TempDir()
		cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
		cfgs = append(cfgs, *cfg)
	})
	acquireOnLeaderHTTP(t, nodes, "k", "a")
	l := tlsLeader(t, nodes)
	fi := 0
	for nodes[fi] == l {
		fi++
	}
	f := nodes[fi]
	sendDamagedSnapshot(t, f, l, nodes, l.node.Status().Term, secretDial(t, *testSecret, l.id, true))

	acquireOnLeaderHTTP(t, nodes, "after-the-snapshot", "b")
	eventually(t, f.id+" to apply a write after the damaged snapshot", func() bool { return holdsLease(f, "after-the-snapshot", "b", 2) })
	if !holdsLease(f, "k", "a", 1) {
		t.Errorf("%s lost the lease it held before the damaged snapshot", f.id)
	}
	if got := f.node.RaftPortStats().MessagesRefused; got != 1 {
		t.Errorf("%s counted %d messages refused, want the snapshot", f.id, got)
	}
	t.Logf("logged:\n%s", logs.String())

	f.stop()
	f = restartPortNode(t, cfgs[fi], f.addr)
	nodes[fi] = f
	acquireOnLeaderHTTP(t, nodes, "after-the-restart", "c")
	eventually(t, f.id+" to apply a write after its restart", func() bool { return holdsLease(f, "after-the-restart", "c", 3) })
	if !holdsLease(f, "k", "a", 1) {
		t.Errorf("%s, restarted, lost the lease it held before the damaged snapshot", f.id)
	}
}
