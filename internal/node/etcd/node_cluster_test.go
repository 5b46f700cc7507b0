package etcd

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/fencelock/fencelock/internal/clustersecret"
	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/node"
	"github.com/fencelock/fencelock/internal/node/etcd/etcdcodec"
	"github.com/fencelock/fencelock/internal/replica"
	"github.com/fencelock/fencelock/internal/tlsconfig"
	"github.com/fencelock/fencelock/internal/tlsconfig/tlstest"
)

// etcdTestNet is an etcdNet in one process: lossless, except that a cut
// member neither sends nor receives, and a closed one receives nothing.
type etcdTestNet struct {
	mu      sync.Mutex
	deliver map[uint64]func(*raftpb.Message)
	cut     map[uint64]bool
	snaps   map[uint64]int // MsgSnaps sent, by receiver
}

func (nw *etcdTestNet) attach(id uint64, deliver func(*raftpb.Message), r etcdReporter) func([]*raftpb.Message) {
	nw.mu.Lock()
	nw.deliver[id] = deliver
	nw.mu.Unlock()
	return func(msgs []*raftpb.Message) {
		nw.mu.Lock()
		defer nw.mu.Unlock()
		lost := map[uint64]bool{}
		for _, m := range msgs {
			d, ok := nw.deliver[m.GetTo()]
			sent := ok && !nw.cut[m.GetFrom()] && !nw.cut[m.GetTo()]
			if sent {
				d(proto.Clone(m).(*raftpb.Message))
			} else if !lost[m.GetTo()] {
				lost[m.GetTo()] = true // once a batch: the core's reports are bounded
				r.reportUnreachable(m.GetTo())
			}
			// As a transport does once a snapshot is delivered or
			// lost: raft sends that peer nothing else until then.
			if m.GetType() == raftpb.MsgSnap {
				nw.snaps[m.GetTo()]++
				r.reportSnapshot(m.GetTo(), sent)
			}
		}
	}
}

// snapsTo is how many snapshots were sent to id.
func (nw *etcdTestNet) snapsTo(id uint64) int {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	return nw.snaps[id]
}

func (nw *etcdTestNet) setCut(id uint64, cut bool) {
	nw.mu.Lock()
	nw.cut[id] = cut
	nw.mu.Unlock()
}

func (nw *etcdTestNet) detach(id uint64) {
	nw.mu.Lock()
	delete(nw.deliver, id)
	nw.mu.Unlock()
}

// etcdCluster is Nodes over one etcdTestNet, used through
// Replicator, and what they acknowledged.
type etcdCluster struct {
	t   *testing.T
	net *etcdTestNet // nil: members talk over their raft ports (transport)
	ca  *tlstest.CA  // with net nil: the raft ports run TLS with node certificates from it
	// secret, with net nil and no ca: the raft ports run TLS with the
	// secret's certificates; with neither, plain TCP (InsecureRaft).
	secret *clustersecret.Secret
	addrs  map[string]string
	lns    map[string]net.Listener // each member's first listener, made before any starts
	peers  []node.Peer
	names  []string // in start order
	ms     map[string]*etcdMember
	acked  []etcdAck
	// edit, when set, changes each member's Config before its first
	// start.
	edit func(*node.Config)
}

type etcdMember struct {
	r    replica.Replicator
	n    *Node
	f    *fsm.FSM
	cfg  node.Config
	dead bool
}

type etcdAck struct {
	key          string
	token, index uint64
}

// newEtcdCluster starts a member for each name, bootstrapped together.
func newEtcdCluster(t *testing.T, names ...string) *etcdCluster {
	cl := &etcdCluster{t: t, net: &etcdTestNet{deliver: map[uint64]func(*raftpb.Message){}, cut: map[uint64]bool{},
		snaps: map[uint64]int{}},
		ms: map[string]*etcdMember{}}
	return cl.boot(names)
}

// newEtcdSecretCluster is newEtcdCluster over raft ports on loopback
// that run TLS with a cluster secret's certificates.
func newEtcdSecretCluster(t *testing.T, names ...string) *etcdCluster {
	s, err := clustersecret.New()
	if err != nil {
		t.Fatal(err)
	}
	cl := &etcdCluster{t: t, secret: &s, ms: map[string]*etcdMember{}}
	return cl.boot(names)
}

// newEtcdTCPCluster is newEtcdCluster over raft ports on loopback: TCP,
// or TLS with ca set.
func newEtcdTCPCluster(t *testing.T, ca *tlstest.CA, names ...string) *etcdCluster {
	cl := &etcdCluster{t: t, ca: ca, ms: map[string]*etcdMember{}}
	return cl.boot(names)
}

// add starts a member for each name, bootstrapped together (once, on a
// cluster made with no names: after edit is set).
func (cl *etcdCluster) add(names ...string) { cl.boot(names) }

func (cl *etcdCluster) boot(names []string) *etcdCluster {
	for _, n := range names {
		cl.peers = append(cl.peers, node.Peer{ID: n, RaftAddr: cl.addr(n)})
	}
	for _, n := range names {
		cl.start(n, false)
	}
	return cl
}

// addr is name's raft address: its listener's on a raft port (made on
// first use), else a name only the in-process network routes.
func (cl *etcdCluster) addr(name string) string {
	if cl.net != nil {
		return name + ":7000"
	}
	if a, ok := cl.addrs[name]; ok {
		return a
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		cl.t.Fatal(err)
	}
	if cl.addrs == nil {
		cl.addrs, cl.lns = map[string]string{}, map[string]net.Listener{}
	}
	cl.addrs[name], cl.lns[name] = ln.Addr().String(), ln
	return cl.addrs[name]
}

// start opens name's node (again, on the same data dir, when it ran
// before); join: bootstrap nothing, wait to be added.
func (cl *etcdCluster) start(name string, join bool) *etcdMember {
	t := cl.t
	t.Helper()
	m := cl.ms[name]
	if m == nil {
		cfg := etcdTestConfig(t.TempDir(), name)
		cfg.ElectionTimeout = 100 * time.Millisecond
		cfg.HeartbeatTimeout = 100 * time.Millisecond
		cfg.RaftAddr = cl.addr(name)
		cfg.Peers, cfg.Join = cl.peers, join
		if join {
			cfg.Peers = nil
		}
		switch {
		case cl.secret != nil:
			c, err := clustersecret.NewCredential(*cl.secret, nil, name)
			if err != nil {
				t.Fatal(err)
			}
			cfg.TLS = c
		case cl.ca == nil:
			cfg.InsecureRaft = true
		}
		if cl.ca != nil {
			f := tlstest.Write(t, t.TempDir(), name, cl.ca, cl.ca.IssueNode(t, name))
			r, err := tlsconfig.Load(tlsconfig.Files{CertFile: f.Cert, KeyFile: f.Key, CAFile: f.CA})
			if err != nil {
				t.Fatal(err)
			}
			cfg.TLS = r
		}
		if cl.edit != nil {
			cl.edit(&cfg)
		}
		m = &etcdMember{cfg: cfg}
		cl.ms[name] = m
		cl.names = append(cl.names, name)
	}
	m.f = fsm.New(nil)
	var network etcdNet
	if cl.net != nil {
		network = cl.net
	} else if ln, ok := cl.lns[name]; ok {
		m.cfg.Listener = ln // the first start; a restart listens on the address again
		delete(cl.lns, name)
	} else {
		m.cfg.Listener = nil
	}
	n, err := openNode(m.cfg, m.f, network, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	m.r, m.n, m.dead = n, n, false
	return m
}

// kill closes name's node and takes it off the network.
func (cl *etcdCluster) kill(name string) {
	cl.t.Helper()
	m := cl.ms[name]
	if cl.net != nil {
		cl.net.detach(etcdcodec.ID(name))
	}
	if err := m.n.Close(); err != nil {
		cl.t.Fatal(err)
	}
	m.dead = true
}

// leader waits for a live member other than those in except to lead:
// polling for an election, with a deadline.
func (cl *etcdCluster) leader(except ...string) string {
	t := cl.t
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		for _, name := range cl.names {
			m := cl.ms[name]
			skip := m.dead
			for _, e := range except {
				skip = skip || e == name
			}
			if !skip && m.r.Status().State == replica.Leader {
				return name
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Fatal("no leader")
	return ""
}

// follower is a live member that does not lead now, other than those
// in except.
func (cl *etcdCluster) follower(except ...string) string {
	cl.t.Helper()
	l := cl.leader()
	for _, name := range cl.names {
		if name != l && !cl.ms[name].dead && !slices.Contains(except, name) {
			return name
		}
	}
	cl.t.Fatal("no follower")
	return ""
}

// grant acquires key on the leader, retrying under a new key when
// leadership moved under it (then nothing was acknowledged).
func (cl *etcdCluster) grant(key string, except ...string) {
	t := cl.t
	t.Helper()
	for attempt := 0; ; attempt++ {
		l := cl.leader(except...)
		k := fmt.Sprint(key, "-", attempt)
		res, err := cl.ms[l].r.Propose(acquire(t, k), time.Second)
		if errors.Is(err, replica.ErrNotLeader) && attempt < 50 {
			continue
		}
		if err != nil || res.Err != nil {
			t.Fatalf("acquire %s on %s: %v %+v", key, l, err, res)
		}
		if n := len(cl.acked); n > 0 && res.Lease.Token <= cl.acked[n-1].token {
			t.Fatalf("token %d after %d", res.Lease.Token, cl.acked[n-1].token)
		}
		cl.acked = append(cl.acked, etcdAck{k, res.Lease.Token, res.Index})
		return
	}
}

// checkAcked wants every acknowledged grant, with its token, in every
// live member's state machine, under its token ceiling.
func (cl *etcdCluster) checkAcked() {
	t := cl.t
	t.Helper()
	top := cl.acked[len(cl.acked)-1]
	for _, name := range cl.names {
		m := cl.ms[name]
		if m.dead {
			continue
		}
		timeout := make(chan struct{})
		timer := time.AfterFunc(20*time.Second, func() { close(timeout) })
		applied := m.f.WaitApplied(top.index, timeout)
		timer.Stop()
		if !applied {
			t.Fatalf("%s never applied index %d, the last acknowledged", name, top.index)
		}
		for _, a := range cl.acked {
			if l, ok := m.f.Get(a.key, m.f.Now()); !ok || l.Token != a.token {
				t.Fatalf("%s: %s holds %+v (%v), want the acknowledged token %d", name, a.key, l, ok, a.token)
			}
		}
		if err := m.r.Covered(top.token, time.Second); err != nil {
			t.Fatalf("%s: the ceiling does not cover %d: %v", name, top.token, err)
		}
	}
}

// peersBecome waits until name, leading, sees each peer in want in its
// state: polling, with a deadline.
func (cl *etcdCluster) peersBecome(name string, want map[string]replica.PeerState) {
	t := cl.t
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	var got []replica.PeerStatus
	var ok bool
	for time.Now().Before(deadline) {
		got, ok = cl.ms[name].r.Peers()
		same := ok && len(got) == len(want)
		for _, p := range got {
			same = same && want[p.ID] == p.State
		}
		if same {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Fatalf("%s sees the peers %+v (ok %v), want %v", name, got, ok, want)
}

// Three Nodes over one network, used only through Replicator: a
// leader cut off from the others fails VerifyLeader and another is
// elected; the cut-off one rejoins; the leader then dies and a third
// election follows. Tokens rise across every leader, and every
// acknowledged token is in every survivor's state machine.
func TestEtcdNodeCluster(t *testing.T) {
	cl := newEtcdCluster(t, "a", "b", "c")
	for i := range 10 {
		cl.grant(fmt.Sprint("k", i))
	}
	l1 := cl.leader()
	if err := cl.ms[l1].r.VerifyLeader(); err != nil {
		t.Fatalf("verify the leader %s with its quorum: %v", l1, err)
	}
	for _, name := range cl.names {
		if name == l1 {
			continue
		}
		if err := cl.ms[name].r.VerifyLeader(); !errors.Is(err, replica.ErrNotLeader) {
			t.Fatalf("verify on the follower %s: %v, want replica.ErrNotLeader", name, err)
		}
		if _, err := cl.ms[name].r.Propose(acquire(t, "on a follower"), time.Second); !errors.Is(err, replica.ErrNotLeader) {
			t.Fatalf("propose on the follower %s: %v, want replica.ErrNotLeader", name, err)
		}
	}
	servers, err := cl.ms[l1].r.Configuration()
	if err != nil || len(servers) != 3 {
		t.Fatalf("configuration %+v, %v", servers, err)
	}
	healthy := map[string]replica.PeerState{}
	for _, name := range cl.names {
		if name != l1 {
			healthy[name] = replica.PeerHealthy
		}
		if _, ok := cl.ms[name].r.Peers(); ok != (name == l1) {
			t.Fatalf("%s answers Peers with ok %v", name, ok)
		}
	}
	cl.peersBecome(l1, healthy)

	// Cut the leader off: it cannot confirm its leadership, and the
	// others elect one of themselves.
	cl.net.setCut(etcdcodec.ID(l1), true)
	if err := cl.ms[l1].r.VerifyLeader(); !errors.Is(err, replica.ErrNotLeader) {
		t.Fatalf("verify on the cut-off leader %s: %v, want replica.ErrNotLeader", l1, err)
	}
	if _, err := cl.ms[l1].r.Propose(acquire(t, "cut off"), time.Second); !errors.Is(err, replica.ErrNotLeader) {
		t.Fatalf("propose on the cut-off %s: %v, want replica.ErrNotLeader", l1, err)
	}
	l2 := cl.leader(l1)
	for i := range 10 {
		cl.grant(fmt.Sprint("j", i), l1)
	}
	if st := cl.ms[l1].r.Status(); st.State == replica.Leader {
		t.Fatalf("the cut-off %s still leads: %+v", l1, st)
	}

	// It rejoins, and the second leader dies.
	cl.net.setCut(etcdcodec.ID(l1), false)
	cl.kill(l2)
	l3 := cl.leader(l2)
	want := map[string]replica.PeerState{l2: replica.PeerUnreachable}
	for _, name := range cl.names {
		if name != l2 && name != l3 {
			want[name] = replica.PeerHealthy
		}
	}
	cl.peersBecome(l3, want)
	for i := range 10 {
		cl.grant(fmt.Sprint("i", i), l2)
	}
	if err := cl.ms[l3].r.Barrier(time.Second); err != nil {
		t.Fatal(err)
	}
	cl.checkAcked()

	// Leadership handed over on purpose.
	for _, name := range cl.names {
		if name != l2 && name != l3 {
			if err := cl.ms[name].r.TransferLeadership(); !errors.Is(err, replica.ErrNotLeader) {
				t.Fatalf("transfer on the follower %s: %v, want replica.ErrNotLeader", name, err)
			}
		}
	}
	if err := cl.ms[l3].r.TransferLeadership(); err != nil {
		t.Fatalf("transfer from %s: %v", l3, err)
	}
	cl.leader(l2, l3)
	cl.grant("after the transfer", l2, l3)
	cl.checkAcked()
}

// configOf waits until name's node has applied a configuration of want
// (node ID → voter), every member named: polling its apply, with a
// deadline.
func (cl *etcdCluster) configOf(name string, want map[string]bool) {
	t := cl.t
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	var got []replica.Server
	var err error
	for time.Now().Before(deadline) {
		got, err = cl.ms[name].r.Configuration()
		if err == nil && len(got) == len(want) {
			same := true
			for _, s := range got {
				v, ok := want[s.ID]
				same = same && ok && v == s.Voter && s.Addr == cl.addr(s.ID)
			}
			if same {
				return
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Fatalf("%s's configuration %+v (%v), want %v", name, got, err, want)
}

// Membership through Replicator: a node started to be joined is added as
// a non-voter, catches up, is promoted, learns every member's name from
// the log, and keeps them across a restart; a follower and then the
// leader itself are removed, and the cluster goes on granting with every
// acknowledged grant on the members left.
func TestEtcdNodeMembership(t *testing.T) {
	etcdMembership(t, newEtcdCluster(t, "a", "b", "c"))
}

func etcdMembership(t *testing.T, cl *etcdCluster) {
	for i := range 5 {
		cl.grant(fmt.Sprint("k", i))
	}
	cl.start("d", true)
	l := cl.leader()
	if err := cl.ms[l].r.AddNonvoter("d", cl.addr("d"), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	cl.configOf(l, map[string]bool{"a": true, "b": true, "c": true, "d": false})
	cl.grant("after d joined")
	cl.checkAcked() // the non-voter has every grant too
	for _, name := range []string{"a", "b", "c"} {
		if name == l {
			continue
		}
		if err := cl.ms[name].r.AddVoter("d", cl.addr("d"), time.Second); !errors.Is(err, replica.ErrNotLeader) {
			t.Fatalf("a change on the follower %s: %v, want replica.ErrNotLeader", name, err)
		}
	}
	if err := cl.ms[l].r.AddVoter("d", cl.addr("d"), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	all := map[string]bool{"a": true, "b": true, "c": true, "d": true}
	cl.configOf(l, all)
	cl.configOf("d", all)

	// d restarts and rebuilds the configuration from its log.
	cl.kill("d")
	cl.start("d", true)
	cl.configOf("d", all)
	cl.grant("after d restarted")

	// A follower is removed, then the leader removes itself.
	var follower string
	for _, name := range []string{"a", "b", "c"} {
		if name != l {
			follower = name
			break
		}
	}
	if err := cl.ms[l].r.RemoveServer(follower, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	delete(all, follower)
	cl.configOf(l, all)
	cl.kill(follower)
	cl.grant("after a follower left")
	if err := cl.ms[l].r.RemoveServer(l, 10*time.Second); err != nil {
		t.Fatalf("the leader %s removing itself: %v", l, err)
	}
	delete(all, l)
	l2 := cl.leader(l)
	cl.configOf(l2, all)
	cl.kill(l)
	cl.grant("after the leader left", l)
	cl.checkAcked()
}

// A node records the commit index that covers every configuration
// change it applied, before it applies it: restarted with an older
// commit index it would start in the older configuration, and a node
// grown from one voter to two would elect itself alone.
func TestEtcdNodeRecordsCommitOfConfChanges(t *testing.T) {
	cl := newEtcdCluster(t, "a")
	cl.grant("k")
	cl.start("b", true)
	if err := cl.ms["a"].r.AddVoter("b", cl.addr("b"), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	cl.grant("after b joined")
	for _, name := range []string{"a", "b"} {
		cl.configOf(name, map[string]bool{"a": true, "b": true})
	}
	cl.kill("a")
	cl.kill("b")
	for _, name := range []string{"a", "b"} {
		st, err := openTestStores(t, cl.ms[name].cfg.DataDir)
		if err != nil {
			t.Fatal(err)
		}
		last, err := st.Logs.LastIndex()
		if err != nil {
			t.Fatal(err)
		}
		ents, err := etcdcodec.Entries(st.Logs, 1, last)
		if err != nil {
			t.Fatal(err)
		}
		var conf uint64
		for _, e := range ents {
			if e.GetType() == raftpb.EntryConfChangeV2 {
				conf = e.GetIndex()
			}
		}
		ms, err := etcdcodec.LoadMemory(st.Logs, st.Stable, nil)
		if err != nil {
			t.Fatal(err)
		}
		hs, _, err := ms.InitialState()
		st.Close()
		if err != nil {
			t.Fatal(err)
		}
		if conf == 0 || hs.GetCommit() < conf {
			t.Fatalf("%s recorded the commit index %d, below the configuration change at %d", name, hs.GetCommit(), conf)
		}
	}
}
