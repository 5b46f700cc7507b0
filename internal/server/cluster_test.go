package server

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fencelock/fencelock/internal/clustersecret"
	"github.com/fencelock/fencelock/internal/locktable"
	"github.com/fencelock/fencelock/internal/node"
	"github.com/fencelock/fencelock/internal/replica"
)

// An in-process cluster on raft's in-memory transport: partitions are
// Disconnect calls, and every node serves HTTP on its own test server.
// On the etcd engine (FENCELOCK_TEST_ENGINE=etcd), which has no
// in-memory transport here, every node has a raft port on loopback
// instead, and the tests that cut links skip: the etcd engine's
// partitions are tested in internal/node and by the process suite.

type clusterNode struct {
	*testServer
	id    string
	trans *raft.InmemTransport // nil on the etcd engine
	addr  string               // client address (host:port)
	raft  string               // raft address
	// frozen, when set, holds every call to the client port until the
	// caller gives up or the test ends: a node frozen as SIGSTOP
	// freezes it, as far as other nodes' calls to it go.
	frozen atomic.Bool
}

// etcdEngine says whether these tests run on the etcd engine.
func etcdEngine() bool { return os.Getenv("FENCELOCK_TEST_ENGINE") == node.EngineEtcd }

// needLinks skips a test that cuts raft links on an engine without an
// in-memory transport.
func needLinks(t *testing.T) {
	t.Helper()
	if etcdEngine() {
		t.Skip("cuts raft links, which needs raft's in-memory transport; the etcd engine's partitions are tested in internal/node and by the process suite")
	}
}

// raftPort is a loopback listener for a node's raft port (the etcd
// engine's tests), and its address.
func raftPort(t *testing.T) (net.Listener, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln, ln.Addr().String()
}

type testCluster struct {
	t     *testing.T
	nodes []*clusterNode
}

// testSecret is the cluster secret of the tests' clusters: clusterConfig
// gives it to every node, as the README's three-node example does.
var testSecret = func() *clustersecret.Secret {
	s, err := clustersecret.New()
	if err != nil {
		panic(err)
	}
	return &s
}()

func clusterConfig(id string) Config {
	cfg := fastConfig("")
	cfg.NodeID = id
	cfg.ClusterSecret = testSecret
	// Looser than a single node's: several nodes share two busy cores. A
	// follower calls an election 300ms after its leader's last word
	// (internal/node/hashicorp/failover.go), and a leader steps down when
	// it has not heard from a quorum for as long: at 100ms and 50ms, a
	// loaded machine (four busy loops beside the suite) changed leaders
	// under tests several times a minute.
	cfg.HeartbeatTimeout = 300 * time.Millisecond
	cfg.ElectionTimeout = 300 * time.Millisecond
	cfg.LeaderLeaseTimeout = 300 * time.Millisecond
	cfg.ClockCheckpoint = 50 * time.Millisecond
	return cfg
}

// newNode starts a node whose HTTP address is known before raft starts.
func newNode(t *testing.T, cfg Config, trans *raft.InmemTransport) *clusterNode {
	t.Helper()
	var srv atomic.Pointer[Server]
	var n *clusterNode
	ended := make(chan struct{}) // closed before n stops (below): a frozen call must not hold that up
	hs := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.frozen.Load() {
			select {
			case <-r.Context().Done():
			case <-ended:
			}
			return
		}
		srv.Load().Handler().ServeHTTP(w, r)
	}))
	cfg.ClientAddr = hs.Listener.Addr().String()
	raftAddr := cfg.RaftAddr
	switch {
	case etcdEngine() && cfg.raftListener == nil:
		var ln net.Listener
		ln, raftAddr = raftPort(t)
		cfg.RaftAddr, cfg.raftListener = raftAddr, ln
		trans = nil
	case etcdEngine():
		trans = nil
	default:
		cfg.Transport = trans
		raftAddr = string(trans.LocalAddr())
	}
	s, err := New(cfg)
	if err != nil {
		hs.Close()
		t.Fatal(err)
	}
	srv.Store(s)
	hs.Start()
	n = &clusterNode{testServer: &testServer{Server: s, t: t, url: hs.URL, hs: hs}, id: cfg.NodeID, trans: trans, addr: cfg.ClientAddr, raft: raftAddr}
	t.Cleanup(n.stop)
	t.Cleanup(func() { close(ended) })
	return n
}

// startCluster starts n voters from a static peer list, all connected.
func startCluster(t *testing.T, n int, tweak func(*Config)) *testCluster {
	t.Helper()
	c := &testCluster{t: t}
	var peers []Peer
	trans := make([]*raft.InmemTransport, n)
	lns := make([]net.Listener, n)
	for i := range n {
		id := fmt.Sprintf("n%d", i+1)
		if etcdEngine() {
			var addr string
			lns[i], addr = raftPort(t)
			peers = append(peers, Peer{ID: id, RaftAddr: addr})
			continue
		}
		_, trans[i] = raft.NewInmemTransport(raft.ServerAddress(id))
		peers = append(peers, Peer{ID: id, RaftAddr: id})
	}
	connectAll(trans)
	for i := range n {
		cfg := clusterConfig(peers[i].ID)
		cfg.Peers = peers
		if lns[i] != nil {
			cfg.RaftAddr, cfg.raftListener = peers[i].RaftAddr, lns[i]
		}
		if tweak != nil {
			tweak(&cfg)
		}
		c.nodes = append(c.nodes, newNode(t, cfg, trans[i]))
	}
	return c
}

// connectAll connects every pair of the in-memory transports, both ways
// (none on the etcd engine).
func connectAll(trans []*raft.InmemTransport) {
	for i := range trans {
		for j := range trans {
			if i != j && trans[i] != nil && trans[j] != nil {
				trans[i].Connect(trans[j].LocalAddr(), trans[j])
			}
		}
	}
}

// leader waits for a ready leader among nodes (all nodes when none given).
func (c *testCluster) leader(among ...*clusterNode) *clusterNode {
	c.t.Helper()
	if len(among) == 0 {
		among = c.nodes
	}
	var l *clusterNode
	eventually(c.t, "a ready leader", func() bool {
		for _, n := range among {
			if n.Ready() {
				l = n
				return true
			}
		}
		return false
	})
	return l
}

func (c *testCluster) others(n *clusterNode) []*clusterNode {
	var out []*clusterNode
	for _, o := range c.nodes {
		if o != n {
			out = append(out, o)
		}
	}
	return out
}

// send sends a request to the ready leader among nodes (all nodes when
// none given) until an answer other than 503, and returns it with the
// node that gave it. On a loaded machine a cluster may elect again
// between two steps of a test: the system promises a leader, not which
// node it is. A write sent this way carries a request id, so a retry of
// one whose first answer was lost answers the original.
func (c *testCluster) send(among []*clusterNode, method, path, body string) (answer, *clusterNode) {
	c.t.Helper()
	var (
		a answer
		l *clusterNode
	)
	eventually(c.t, "an answer to "+method+" "+path, func() bool {
		l = c.leader(among...)
		a = l.do(context.Background(), method, path, body)
		if a.status == 503 {
			c.t.Logf("%s %s on %s: 503 %v; again on the leader", method, path, l.id, a.body)
			return false
		}
		return true
	})
	return a, l
}

// isolateLeader cuts the leader off and returns it. If leadership moved
// between finding the leader and cutting it off, the node cut off is a
// follower: heal and try again, so the node returned led when it was cut
// off (alone it cannot be elected again).
func (c *testCluster) isolateLeader() *clusterNode {
	c.t.Helper()
	var l *clusterNode
	eventually(c.t, "a leader to cut off", func() bool {
		l = c.leader()
		c.isolate(l)
		if l.node.Status().State == replica.Leader {
			return true
		}
		c.t.Logf("%s stopped leading before it was cut off; again", l.id)
		c.heal()
		return false
	})
	return l
}

// isolate cuts n off from every other node, both ways.
func (c *testCluster) isolate(n *clusterNode) {
	needLinks(c.t)
	n.trans.DisconnectAll()
	for _, o := range c.others(n) {
		o.trans.Disconnect(n.trans.LocalAddr())
	}
}

// heal reconnects every pair.
func (c *testCluster) heal() {
	needLinks(c.t)
	for _, a := range c.nodes {
		for _, b := range c.nodes {
			if a != b {
				a.trans.Connect(b.trans.LocalAddr(), b.trans)
			}
		}
	}
}

func acquireBody(key, holder string, ttlMs int, requestID string) string {
	return fmt.Sprintf(`{"key":%q,"holder":%q,"ttl_ms":%d,"request_id":%q}`, key, holder, ttlMs, requestID)
}

func TestClusterFollowerNamesTheLeaderAndReadsAreLinearizable(t *testing.T) {
	c := startCluster(t, 3, nil)
	l := c.leader()
	f := c.others(l)[0]
	eventually(t, "the follower to learn the leader's address", func() bool {
		a := f.post("/v1/acquire", acquireBody("k", "a", 60000, ""))
		return a.status == 503 && a.body["code"] == "not_leader" && a.body["leader"] == l.addr
	})
	g := l.post("/v1/acquire", acquireBody("k", "a", 60000, ""))
	if g.status != 200 || num(g, "token") != 1 {
		t.Fatalf("acquire on the leader: %d %v", g.status, g.body)
	}
	for _, path := range []string{"/v1/check?key=k&token=1", "/v1/lock?key=k", "/v1/locks", "/readyz"} {
		if a := f.get(path); a.status != 503 || a.body["code"] != "not_leader" || a.body["leader"] != l.addr {
			t.Fatalf("GET %s on a follower: %d %v", path, a.status, a.body)
		}
	}
	if a := l.get("/v1/check?key=k&token=1"); a.status != 200 || a.body["valid"] != true {
		t.Fatalf("check on the leader: %d %v", a.status, a.body)
	}
	m := f.get("/v1/cluster/members")
	if m.status != 200 || m.body["leader"] != l.id || m.body["leader_addr"] != l.addr || len(m.body["members"].([]any)) != 3 {
		t.Fatalf("members on a follower: %d %v", m.status, m.body)
	}
	// Followers of a cluster formed from a static peer list announce their
	// client addresses to the leader.
	eventually(t, "every member's client address", func() bool {
		m := f.get("/v1/cluster/members")
		for _, n := range c.nodes {
			if !strings.Contains(fmt.Sprint(m.body["members"]), n.addr) {
				return false
			}
		}
		return true
	})
}

// A leader cut off from the majority can grant nothing; the majority
// elects a leader that continues from the last committed time and token;
// the healed node converges and follows it.
func TestClusterMinorityCannotGrantMajorityContinues(t *testing.T) {
	c := startCluster(t, 3, nil)
	first, at := c.send(nil, "POST", "/v1/acquire", acquireBody("held", "a", 60000, "held-1"))
	if first.status != 200 || num(first, "token") != 1 {
		t.Fatalf("acquire: %d %v", first.status, first.body)
	}
	lease, _ := at.fsm.Get("held", at.fsm.Now())
	if a, _ := c.send(nil, "POST", "/v1/acquire", acquireBody("short", "a", 1000, "short-1")); a.status != 200 || num(a, "token") != 2 {
		t.Fatalf("short lease: %d %v", a.status, a.body)
	}

	old := c.isolateLeader()
	majority := c.others(old)
	for i := range 3 {
		a := old.post("/v1/acquire", acquireBody(fmt.Sprintf("minority-%d", i), "m", 60000, ""))
		if a.status == 200 {
			t.Fatalf("the isolated old leader granted: %v", a.body)
		}
	}
	if a := old.get("/v1/check?key=held&token=1"); a.status == 200 {
		t.Fatalf("the isolated old leader answered a read: %v", a.body)
	}
	// Whichever node of the majority leads at each step (two nodes on a
	// loaded machine may elect again) answers the same.
	nl := c.leader(majority...)
	// The new leader resumed cluster time from the last applied time; the
	// lease kept its expiry: not reset to a full TTL, not shortened.
	moved, _ := nl.fsm.Get("held", nl.fsm.Now())
	if moved != lease {
		t.Fatalf("lease after failover %+v, before %+v", moved, lease)
	}
	var now locktable.Time
	eventually(t, "the cluster time of the majority's leader", func() bool {
		var ok bool
		now, ok = c.leader(majority...).ClusterTime()
		return ok
	})
	if now < lease.Granted {
		t.Fatalf("cluster time went backwards: %d < %d", now, lease.Granted)
	}
	if g, _ := c.send(majority, "GET", "/v1/lock?key=held", ""); g.status != 200 || num(g, "remaining_ms") >= 60000 || num(g, "token") != 1 {
		t.Fatalf("get after failover: %d %v", g.status, g.body)
	}
	second, _ := c.send(majority, "POST", "/v1/acquire", acquireBody("next", "b", 60000, "next-1"))
	if second.status != 200 || num(second, "token") != 3 {
		t.Fatalf("acquire on the majority: %d %v", second.status, second.body)
	}
	if a, _ := c.send(majority, "POST", "/v1/acquire", acquireBody("held", "intruder", 1000, "intruder-1")); a.status != 409 {
		t.Fatalf("the majority granted a live lease to another holder: %d %v", a.status, a.body)
	}
	// The new leader's timer expires the short lease the old leader
	// granted and hands the key to a waiter. A waiter whose leader is lost
	// sends the same request to the next one and keeps its queue place.
	w, nl := c.send(majority, "POST", "/v1/acquire", `{"key":"short","holder":"waiter","ttl_ms":60000,"wait_ms":10000,"request_id":"wait-1"}`)
	if w.status != 200 || num(w, "token") != 4 {
		t.Fatalf("waiter after the short lease expired: %d %v", w.status, w.body)
	}
	// Any term the old leader could lead again after healing is later
	// than the majority's now.
	term := nl.node.Status().Term
	target := nl.fsm.AppliedIndex()
	c.heal()
	eventually(t, "the healed node to converge", func() bool {
		return old.fsm.LastToken() == 4 && old.fsm.AppliedIndex() >= target
	})
	if old.Ready() && old.node.Status().Term <= term {
		t.Fatalf("the healed old leader serves (term %d, the majority's %d)", old.node.Status().Term, term)
	}
	eventually(t, "the healed node to name the cluster's leader", func() bool {
		l := c.leader()
		if l == old {
			// Elected again after it caught up (a loaded machine): only
			// in a later term than the majority's.
			return old.node.Status().Term > term
		}
		a := old.post("/v1/acquire", acquireBody("k", "a", 60000, ""))
		return a.status == 503 && a.body["leader"] == l.addr
	})
}

// A write retried with its request id after a leader change answers the
// original result instead of granting again.
func TestClusterRetryAfterLeaderChangeAnswersTheOriginal(t *testing.T) {
	c := startCluster(t, 3, nil)
	old := c.leader()
	body := acquireBody("job", "w", 60000, "req-1")
	first := old.post("/v1/acquire", body)
	if first.status != 200 {
		t.Fatalf("acquire: %v", first.body)
	}
	ext := `{"key":"job","holder":"w","token":1,"ttl_ms":30000,"request_id":"ext-1"}`
	e1 := old.post("/v1/extend", ext)
	c.isolate(old)
	nl := c.leader(c.others(old)...)
	again := nl.post("/v1/acquire", body)
	if again.status != 200 || num(again, "token") != num(first, "token") || nl.fsm.LastToken() != 1 {
		t.Fatalf("retry on the new leader: %v (last token %d), first %v", again.body, nl.fsm.LastToken(), first.body)
	}
	e2 := nl.post("/v1/extend", ext)
	if e1.status != 200 || e2.status != 200 {
		t.Fatalf("extend then its retry: %v, %v", e1.body, e2.body)
	}
	l, _ := nl.fsm.Get("job", nl.fsm.Now())
	if l.TTL != 30*locktable.Second {
		t.Fatalf("lease after the retried extend: %+v", l)
	}
	c.heal()
}

// A follower that missed more than the leader keeps in its log catches up
// from a snapshot and serves the same state when it leads.
func TestClusterLaggingNodeCatchesUpFromASnapshot(t *testing.T) {
	c := startCluster(t, 3, func(cfg *Config) {
		cfg.TrailingLogs = 5
		cfg.SnapshotThreshold = 20
	})
	l := c.leader()
	lag := c.others(l)[0]
	c.isolate(lag)
	for i := range 60 {
		if a := l.post("/v1/acquire", acquireBody(fmt.Sprintf("k%d", i), "h", 60000, "")); a.status != 200 {
			t.Fatalf("acquire %d: %d %v", i, a.status, a.body)
		}
	}
	if err := l.snapshotter(t).Snapshot(); err != nil {
		t.Fatal(err)
	}
	c.heal()
	eventually(t, "the lagging node to install the snapshot", func() bool {
		return lag.fsm.LastToken() == 60 && lag.raftNode(t).Stats()["last_snapshot_index"] != "0"
	})
	// Hand leadership to the caught-up node; it serves the same leases.
	if err := l.raftNode(t).TransferLeadershipTo(lag.id, string(lag.trans.LocalAddr())); err != nil {
		t.Fatal(err)
	}
	c.leader(lag)
	for i := range 60 {
		if a := lag.get(fmt.Sprintf("/v1/lock?key=k%d", i)); a.status != 200 || num(a, "token") != uint64(i+1) {
			t.Fatalf("k%d on the caught-up leader: %v", i, a.body)
		}
	}
	if a := lag.post("/v1/acquire", acquireBody("after", "h", 60000, "")); num(a, "token") != 61 {
		t.Fatalf("next token: %v", a.body)
	}
}

// Nodes started with Join wait until the leader adds them; a removed node
// leaves the voters.
func TestClusterJoinAndRemove(t *testing.T) {
	trans := make([]*raft.InmemTransport, 3)
	for i := range trans {
		if !etcdEngine() {
			_, trans[i] = raft.NewInmemTransport(raft.ServerAddress(fmt.Sprintf("n%d", i+1)))
		}
	}
	connectAll(trans)
	c := &testCluster{t: t}
	for i, tr := range trans {
		cfg := clusterConfig(fmt.Sprintf("n%d", i+1))
		cfg.Join = i > 0
		c.nodes = append(c.nodes, newNode(t, cfg, tr))
	}
	l := c.leader()
	if l.id != "n1" {
		t.Fatalf("leader %s; only n1 bootstraps", l.id)
	}
	for _, n := range c.nodes[1:] {
		body := fmt.Sprintf(`{"id":%q,"raft_addr":%q,"client_addr":%q}`, n.id, n.raft, n.addr)
		if a := n.post("/v1/cluster/join", body); a.status != 503 || a.body["code"] != "not_leader" {
			t.Fatalf("join on a node that is not the leader: %v", a.body)
		}
		if a := c.post("/v1/cluster/join", body); a.status != 200 { // retried on 503: a loaded machine may elect again
			t.Fatalf("join %s: %d %v", n.id, a.status, a.body)
		}
	}
	// From here on whichever node leads is asked: with three voters a
	// loaded machine may elect another (the first leader is n1 only
	// because it alone bootstrapped).
	m, _ := c.send(nil, "GET", "/v1/cluster/members", "")
	if ms := m.body["members"].([]any); len(ms) != 3 || !strings.Contains(fmt.Sprint(ms), c.nodes[2].addr) {
		t.Fatalf("members: %v", m.body)
	}
	if a := c.post("/v1/acquire", acquireBody("k", "a", 60000, "")); a.status != 200 || num(a, "token") != 1 {
		t.Fatalf("acquire: %d %v", a.status, a.body)
	}
	eventually(t, "the joined nodes to replicate", func() bool {
		return c.nodes[1].fsm.LastToken() == 1 && c.nodes[2].fsm.LastToken() == 1
	})
	n3 := c.nodes[2]
	rest := c.others(n3)
	if a, _ := c.send(nil, "POST", "/v1/cluster/remove", `{"id":"n3"}`); a.status != 200 {
		t.Fatalf("remove: %d %v", a.status, a.body)
	}
	if a, _ := c.send(rest, "POST", "/v1/cluster/remove", `{"id":"n9"}`); a.status != 404 {
		t.Fatalf("remove of an unknown id: %d %v", a.status, a.body)
	}
	m, _ = c.send(rest, "GET", "/v1/cluster/members", "")
	if ms := m.body["members"].([]any); len(ms) != 2 {
		t.Fatalf("members after remove: %v", m.body)
	}
	// A removed node's announcement does not make it a voter again.
	if a, _ := c.send(rest, "POST", "/v1/cluster/announce", fmt.Sprintf(`{"id":"n3","raft_addr":%q,"client_addr":%q}`, n3.raft, n3.addr)); a.status != 404 {
		t.Fatalf("announce of a removed node: %d %v", a.status, a.body)
	}
}

// partition splits the cluster into groups that reach only their own
// members.
func (c *testCluster) partition(groups ...[]*clusterNode) {
	needLinks(c.t)
	for _, n := range c.nodes {
		n.trans.DisconnectAll()
	}
	for _, g := range groups {
		for _, a := range g {
			for _, b := range g {
				if a != b {
					a.trans.Connect(b.trans.LocalAddr(), b.trans)
				}
			}
		}
	}
}

// Five nodes survive two failures: the leader and one follower cut off
// together cannot grant, the other three elect a leader and serve, and
// after healing all five agree.
func TestClusterFiveNodesMinorityOfTwo(t *testing.T) {
	c := startCluster(t, 5, nil)
	old := c.leader()
	if a := old.post("/v1/acquire", acquireBody("k", "a", 60000, "")); a.status != 200 {
		t.Fatalf("acquire: %v", a.body)
	}
	rest := c.others(old)
	minority := []*clusterNode{old, rest[0]}
	majority := rest[1:]
	c.partition(minority, majority)
	for _, n := range minority {
		if a := n.post("/v1/acquire", acquireBody("minority", "m", 60000, "")); a.status == 200 {
			t.Fatalf("%s in the minority granted: %v", n.id, a.body)
		}
	}
	nl := c.leader(majority...)
	if a := nl.post("/v1/acquire", acquireBody("majority", "b", 60000, "")); a.status != 200 || num(a, "token") != 2 {
		t.Fatalf("acquire on the majority: %v", a.body)
	}
	c.heal()
	target := nl.fsm.AppliedIndex() // the leader keeps committing time: aim at a fixed index
	eventually(t, "all five to converge", func() bool {
		for _, n := range c.nodes {
			if n.fsm.LastToken() != 2 || n.fsm.AppliedIndex() < target {
				return false
			}
		}
		return true
	})
	for _, n := range c.nodes {
		if _, ok := n.fsm.Get("minority", n.fsm.Now()); ok {
			t.Fatalf("%s has the minority's grant", n.id)
		}
	}
}

// A single node restarted as a cluster node (new raft address) updates its
// own address in the configuration, so peers that join can reach it.
func TestSingleNodeRestartedWithARaftAddress(t *testing.T) {
	dir := t.TempDir()
	cfg := clusterConfig("fencelock-1")
	cfg.DataDir = dir
	first := startServer(t, cfg)
	if a := first.post("/v1/acquire", acquireBody("k", "a", 60000, "")); a.status != 200 {
		t.Fatalf("acquire: %v", a.body)
	}
	first.stop()
	_, trans := raft.NewInmemTransport("127.0.0.1:7480")
	n := newNode(t, cfg, trans)
	c := &testCluster{t: t, nodes: []*clusterNode{n}}
	c.leader()
	srv, err := n.node.Configuration()
	if err != nil {
		t.Fatal(err)
	}
	if len(srv) != 1 || srv[0].Addr != n.raft {
		t.Fatalf("configuration after the restart: %+v", srv)
	}
	if a := n.get("/v1/lock?key=k"); a.status != 200 || num(a, "token") != 1 {
		t.Fatalf("lease after the restart: %v", a.body)
	}
}
