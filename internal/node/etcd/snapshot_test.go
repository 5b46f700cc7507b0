package etcd

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/node"
	"github.com/fencelock/fencelock/internal/node/etcd/etcdcodec"
	"github.com/fencelock/fencelock/internal/tlsconfig/tlstest"
)

// A snapshot's data as raft carries it decodes to the names and state
// machine bytes it was made of; a flipped byte in the names, or names
// cut short, is refused.
func TestEtcdSnapDataRoundTrip(t *testing.T) {
	cs := &raftpb.ConfState{Voters: []uint64{etcdcodec.ID("a"), etcdcodec.ID("b")}, Learners: []uint64{etcdcodec.ID("c")}}
	names := map[uint64]node.Peer{}
	for _, n := range []string{"a", "b", "c"} {
		names[etcdcodec.ID(n)] = node.Peer{ID: n, RaftAddr: n + ":7000"}
	}
	head, err := etcdcodec.SnapHeader(cs, names)
	if err != nil {
		t.Fatal(err)
	}
	data := append(head, "the state machine"...)
	got, fsmData, err := etcdcodec.DecodeSnap(data)
	if err != nil || string(fsmData) != "the state machine" || len(got) != 3 {
		t.Fatalf("decoded %v %q %v", got, fsmData, err)
	}
	for id, p := range names {
		if got[id] != p {
			t.Fatalf("member %x decoded as %+v, want %+v", id, got[id], p)
		}
	}
	for i := range head {
		bad := bytes.Clone(data)
		bad[i] ^= 0x01
		if _, _, err := etcdcodec.DecodeSnap(bad); err == nil {
			t.Fatalf("a flipped byte at %d of the names was taken", i)
		}
	}
	if _, _, err := etcdcodec.DecodeSnap(head[:len(head)-1]); err == nil {
		t.Fatal("names cut short were taken")
	}
	if _, err := etcdcodec.SnapHeader(&raftpb.ConfState{Voters: []uint64{etcdcodec.ID("x")}}, names); err == nil {
		t.Fatal("a member without a name was encoded")
	}
}

// walFirst is the first index the node's log holds; 0: none.
func walFirst(t *testing.T, n *Node) uint64 {
	t.Helper()
	first, err := n.core.logs.FirstIndex()
	if err != nil {
		t.Fatal(err)
	}
	return first
}

// compacted says whether the node's log no longer starts at 1.
func compacted(t *testing.T, n *Node) bool {
	t.Helper()
	first := walFirst(t, n)
	return first > 1 || first == 0 && n.core.snapIndex.Load() > 0
}

// A node alone snapshots on demand and compacts its log (TrailingLogs
// kept, or none); restarted, it restores the snapshot, replays the
// entries after it once, holds every token it answered, and answers new
// tokens above them.
func TestEtcdNodeSnapshotRestart(t *testing.T) {
	for _, trailing := range []uint64{0, 2} {
		t.Run(fmt.Sprint("trailing ", trailing), func(t *testing.T) {
			dir := t.TempDir()
			cfg := etcdTestConfig(dir, "a")
			cfg.TrailingLogs = trailing
			n, f0 := openTestEtcd(t, cfg)
			awaitLeadership(t, n, true)
			var keys []string
			for i := range 10 {
				keys = append(keys, fmt.Sprint("k", i))
			}
			toks := grantEtcd(t, n, 0, keys[:6]...)
			if err := n.Barrier(time.Second); err != nil {
				t.Fatal(err)
			}
			last, err := n.core.logs.LastIndex()
			if err != nil {
				t.Fatal(err)
			}
			if err := n.Snapshot(); err != nil {
				t.Fatalf("snapshot: %v", err)
			}
			if err := n.Snapshot(); !errors.Is(err, errNothingNew) {
				t.Fatalf("a second snapshot with nothing applied since: %v, want errNothingNew", err)
			}
			snapAt := n.core.snapIndex.Load()
			want := min(snapAt, last-trailing) + 1 // the wal's first index left
			if want > last {
				want = 0 // none left
			}
			if snapAt != last || walFirst(t, n) != want {
				t.Fatalf("the log starts at %d after a snapshot at %d (last %d), want %d", walFirst(t, n), snapAt, last, want)
			}
			toks = append(toks, grantEtcd(t, n, toks[len(toks)-1], keys[6:]...)...)
			top := toks[len(toks)-1]
			if got := f0.LastToken(); got != top {
				t.Fatalf("last token %d, want %d", got, top)
			}
			if err := n.Close(); err != nil {
				t.Fatal(err)
			}

			var restored atomic.Int32
			cfg.Hooks.Restored = func() { restored.Add(1) }
			n, f := openTestEtcd(t, cfg)
			if got := f.AppliedIndex(); got == 0 || restored.Load() != 1 {
				t.Fatalf("the state machine opened at %d after %d restores, want one of the snapshot at %d", got, restored.Load(), snapAt)
			}
			awaitLeadership(t, n, true)
			if err := n.Barrier(time.Second); err != nil {
				t.Fatal(err)
			}
			for i, k := range keys {
				if l, ok := f.Get(k, f.Now()); !ok || l.Token != toks[i] {
					t.Fatalf("%s holds %+v (%v) after the restart, want the token %d", k, l, ok, toks[i])
				}
			}
			if got := f.LastToken(); got != top {
				t.Fatalf("last token %d after the restart, want %d", got, top)
			}
			grantEtcd(t, n, top, "after the restart")
			if err := n.Snapshot(); err != nil {
				t.Fatalf("a snapshot after the restart: %v", err)
			}
		})
	}
}

// SnapshotThreshold entries applied make a snapshot on their own, checked
// every SnapshotInterval, and the log is compacted behind it.
func TestEtcdNodeSnapshotsOnItsOwn(t *testing.T) {
	cfg := etcdTestConfig(t.TempDir(), "a")
	cfg.SnapshotThreshold, cfg.SnapshotInterval, cfg.TrailingLogs = 4, 5*time.Millisecond, 1
	n, _ := openTestEtcd(t, cfg)
	awaitLeadership(t, n, true)
	var keys []string
	for i := range 8 {
		keys = append(keys, fmt.Sprint("k", i))
	}
	grantEtcd(t, n, 0, keys...)
	deadline := time.Now().Add(10 * time.Second)
	for !compacted(t, n) { // polling the snapshot timer, with a deadline
		if time.Now().After(deadline) {
			t.Fatalf("no snapshot after %d entries (threshold 4): the log still starts at %d", n.AppliedIndex(), walFirst(t, n))
		}
		time.Sleep(5 * time.Millisecond)
	}
	if at := n.core.snapIndex.Load(); at < 4 {
		t.Fatalf("a snapshot at %d", at)
	}
}

// A flipped byte in the newest snapshot refuses the data dir at open,
// naming the snapshot, as on the hashicorp node.
func TestEtcdNodeRefusesADamagedSnapshot(t *testing.T) {
	dir := t.TempDir()
	cfg := etcdTestConfig(dir, "a")
	n, _ := openTestEtcd(t, cfg)
	awaitLeadership(t, n, true)
	key := "a key that is easy to find in the snapshot"
	grantEtcd(t, n, 0, key)
	if err := n.Snapshot(); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	snaps, err := os.ReadDir(filepath.Join(dir, "snapshots"))
	if err != nil || len(snaps) != 1 {
		t.Fatalf("snapshots %v %v", snaps, err)
	}
	id := snaps[0].Name()
	path := filepath.Join(dir, "snapshots", id, "state.bin")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	at := bytes.Index(b, []byte(key))
	if at < 0 {
		t.Fatal("key not found in the snapshot")
	}
	b[at] ^= 0xff
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	n, err = Open(cfg, fsm.New(nil))
	if err == nil {
		n.Close()
		t.Fatal("started on a damaged snapshot")
	}
	var de *node.DataDirError
	if !errors.As(err, &de) || !strings.Contains(err.Error(), filepath.Join("snapshots", id)) {
		t.Fatalf("refusal %v, want a node.DataDirError naming the snapshot %s", err, id)
	}
}

// A leader's MsgSnap carries the data its storage holds: the names and
// the state machine's bytes.
func etcdLeaderSnapNames(t *testing.T, n *Node) map[uint64]node.Peer {
	t.Helper()
	s, err := n.core.ms.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	names, fsmData, err := etcdcodec.DecodeSnap(s.GetData())
	if err != nil {
		t.Fatalf("the leader's snapshot data: %v", err)
	}
	if err := fsm.New(nil).UnmarshalBinary(fsmData); err != nil {
		t.Fatalf("the leader's snapshot data holds no state machine: %v", err)
	}
	return names
}

// awaitApplied waits until name has applied index: polling, with a
// deadline.
func (cl *etcdCluster) awaitApplied(name string, index uint64) {
	cl.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for cl.ms[name].r.AppliedIndex() < index {
		if time.Now().After(deadline) {
			cl.t.Fatalf("%s applied %d, never %d", name, cl.ms[name].r.AppliedIndex(), index)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// A member added after the leader compacted its log catches up through
// the leader's snapshot, has every acknowledged grant, and restarts on
// the snapshot it installed.
func TestEtcdNodeNewMemberCatchesUpFromASnapshot(t *testing.T) {
	cl := newEtcdCluster(t)
	cl.edit = func(c *node.Config) { c.TrailingLogs = 0 }
	cl.add("a", "b", "c")
	for i := range 10 {
		cl.grant(fmt.Sprint("k", i))
	}
	l := cl.leader()
	if err := cl.ms[l].n.Snapshot(); err != nil {
		t.Fatal(err)
	}
	if !compacted(t, cl.ms[l].n) {
		t.Fatal("the leader's log was not compacted")
	}
	if names := etcdLeaderSnapNames(t, cl.ms[l].n); len(names) != 3 || names[etcdcodec.ID("b")].RaftAddr != "b:7000" {
		t.Fatalf("the leader's snapshot names %v", names)
	}
	cl.start("d", true)
	if err := cl.ms[l].r.AddNonvoter("d", "d:7000", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	cl.grant("after d joined")
	cl.checkAcked()
	if cl.net.snapsTo(etcdcodec.ID("d")) == 0 {
		t.Fatal("d caught up without a snapshot")
	}
	if err := cl.ms[l].r.AddVoter("d", "d:7000", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	all := map[string]bool{"a": true, "b": true, "c": true, "d": true}
	cl.configOf("d", all)

	// d restarts on the snapshot it installed and the entries after it.
	cl.kill("d")
	cl.start("d", true)
	cl.configOf("d", all)
	cl.grant("after d restarted")
	cl.checkAcked()
}

// A follower cut off while the leader compacts its log catches up by
// the leader's snapshot once reconnected, with every acknowledged grant.
func TestEtcdNodeCutOffFollowerCatchesUpFromASnapshot(t *testing.T) {
	cl := newEtcdCluster(t)
	cl.edit = func(c *node.Config) { c.TrailingLogs = 0 }
	cl.add("a", "b", "c")
	for i := range 5 {
		cl.grant(fmt.Sprint("k", i))
	}
	f := cl.follower()
	cl.net.setCut(etcdcodec.ID(f), true)
	for i := range 10 {
		cl.grant(fmt.Sprint("j", i), f)
	}
	// Every node but f compacts its log past what f has: whichever of
	// them leads once f is back (a loaded machine may elect the other
	// while f reconnects) can bring f up to date only by a snapshot.
	last := cl.acked[len(cl.acked)-1].index
	for name := range cl.ms {
		if name == f {
			continue
		}
		cl.awaitApplied(name, last)
		if err := cl.ms[name].n.Snapshot(); err != nil {
			t.Fatal(err)
		}
	}
	before := cl.net.snapsTo(etcdcodec.ID(f))
	cl.net.setCut(etcdcodec.ID(f), false)
	cl.grant("after the reconnect", f)
	cl.awaitApplied(f, cl.acked[len(cl.acked)-1].index)
	if cl.net.snapsTo(etcdcodec.ID(f)) == before {
		t.Fatalf("%s caught up without a snapshot", f)
	}
	cl.checkAcked()
	if _, err := cl.ms[f].n.core.ms.Snapshot(); err != nil {
		t.Fatal(err)
	}
	if got := cl.ms[f].n.core.snapIndex.Load(); got == 0 {
		t.Fatalf("%s records no snapshot", f)
	}
}

// A node that stopped after it wrote the leader's snapshot and before it
// deleted the log the snapshot replaces (a log ending before the
// snapshot) opens on the snapshot, drops that log, and goes on.
func TestEtcdNodeOpensAfterAnInterruptedInstall(t *testing.T) {
	dir := t.TempDir()
	cfg := etcdTestConfig(dir, "a")
	cfg.TrailingLogs = 100
	n, _ := openTestEtcd(t, cfg)
	awaitLeadership(t, n, true)
	keys := []string{"k0", "k1", "k2", "k3", "k4", "k5"}
	toks := grantEtcd(t, n, 0, keys...)
	if err := n.Snapshot(); err != nil {
		t.Fatal(err)
	}
	snapAt := n.core.snapIndex.Load()
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	st, err := openTestStores(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Logs.DeleteRange(snapAt-2, snapAt); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	n, f := openTestEtcd(t, cfg)
	if last, err := n.core.logs.LastIndex(); err != nil || last != 0 {
		t.Fatalf("the log before the snapshot at %d was kept: last %d, %v", snapAt, last, err)
	}
	awaitLeadership(t, n, true)
	for i, k := range keys {
		if l, ok := f.Get(k, f.Now()); !ok || l.Token != toks[i] {
			t.Fatalf("%s holds %+v (%v), want the token %d", k, l, ok, toks[i])
		}
	}
	grantEtcd(t, n, toks[len(toks)-1], "after")
}

// Over the raft port (TCP, and TLS): a follower down while the leader
// compacts its log catches up through the leader's snapshot once it is
// restarted; the transport carries the whole encoding and reports it.
func TestEtcdTransportFollowerCatchesUpFromASnapshot(t *testing.T) {
	for _, tc := range []struct {
		name string
		ca   *tlstest.CA
	}{{"tcp", nil}, {"tls", tlstest.NewCA(t, "ca")}} {
		t.Run(tc.name, func(t *testing.T) {
			cl := &etcdCluster{t: t, ca: tc.ca, ms: map[string]*etcdMember{}, edit: func(c *node.Config) { c.TrailingLogs = 0 }}
			cl.boot([]string{"a", "b", "c"})
			for i := range 5 {
				cl.grant(fmt.Sprint("k", i))
			}
			f := cl.follower()
			cl.kill(f)
			for i := range 10 {
				cl.grant(fmt.Sprint("j", i), f)
			}
			l := cl.leader(f)
			if err := cl.ms[l].n.Snapshot(); err != nil {
				t.Fatal(err)
			}
			cl.start(f, false)
			cl.grant("after the restart", f)
			cl.awaitApplied(f, cl.acked[len(cl.acked)-1].index)
			if got := cl.ms[f].n.core.snapIndex.Load(); got == 0 {
				t.Fatalf("%s caught up without installing a snapshot", f)
			}
			cl.checkAcked()
		})
	}
}
