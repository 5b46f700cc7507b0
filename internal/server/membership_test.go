package server

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fencelock/fencelock/api"
)

// Membership changes are checked before they are made: the new node must
// answer as itself and belong to no other cluster, it votes only once it
// has the log, and no change may leave the voters without a reachable
// quorum.

// voters is the node's configuration as id -> suffrage.
func suffrages(t *testing.T, n *clusterNode) map[string]string {
	t.Helper()
	servers, err := n.node.Configuration()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, s := range servers {
		out[s.ID] = s.Suffrage
	}
	return out
}

// deadAddr is a loopback address nobody listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// addNode starts a node on an in-memory transport connected both ways to
// every node of c (it is not added to c.nodes).
func (c *testCluster) addNode(id string, tweak func(*Config)) *clusterNode {
	c.t.Helper()
	var tr *raft.InmemTransport
	if !etcdEngine() {
		_, tr = raft.NewInmemTransport(raft.ServerAddress(id))
		for _, n := range c.nodes {
			n.trans.Connect(tr.LocalAddr(), tr)
			tr.Connect(n.trans.LocalAddr(), n.trans)
		}
	}
	cfg := clusterConfig(id)
	if tweak != nil {
		tweak(&cfg)
	}
	return newNode(c.t, cfg, tr)
}

// announced waits until the leader knows every node's client address
// (nodes from a static peer list announce theirs): the quorum check probes
// the voters there.
func (c *testCluster) announced(l *clusterNode) {
	c.t.Helper()
	eventually(c.t, "every member's client address", func() bool { return len(l.fsm.Members()) == len(c.nodes) })
}

// authSend sends a call with token to the current leader until it
// answers something other than a 503 (a leader may change on a loaded
// machine).
func (c *testCluster) authSend(method, path, body, token string) answer {
	c.t.Helper()
	var a answer
	eventually(c.t, "an answer to "+path, func() bool {
		a = c.leader().authDo(method, path, body, token)
		return a.status != 503
	})
	return a
}

// bootstrap bootstraps the ACLs on the current leader and returns the
// admin token.
func (c *testCluster) bootstrap() string {
	c.t.Helper()
	a := c.authSend("POST", "/v1/acl/bootstrap", "{}", "")
	secret, _ := a.body["secret"].(string)
	if a.status != 200 || secret == "" {
		c.t.Fatalf("bootstrap: %d %v", a.status, a.body)
	}
	return secret
}

// token creates, on the current leader, a principal with one policy of
// rules.
func (c *testCluster) token(admin, name string, rules ...string) string {
	c.t.Helper()
	return makeToken(c.t, c.authSend, admin, name, rules...)
}

// post sends a call to the current leader until it answers something
// other than a 503 (a leader may change on a loaded machine).
func (c *testCluster) post(path, body string) answer {
	c.t.Helper()
	var a answer
	eventually(c.t, "an answer to "+path, func() bool {
		a = c.leader().post(path, body)
		return a.status != 503
	})
	return a
}

func joinBody(id, raftAddr, client string) string {
	return fmt.Sprintf(`{"id":%q,"raft_addr":%q,"client_addr":%q}`, id, raftAddr, client)
}

// The reproduction: a join of a node that is not running was
// applied (a fourth, dead voter). It is refused, nothing changes, and the
// cluster keeps serving.
func TestJoinOfANodeThatIsNotRunningIsRefused(t *testing.T) {
	var dead atomic.Pointer[string] // a raft address to call dead: a real one on the etcd engine
	c := startCluster(t, 3, func(cfg *Config) {
		cfg.dialRaft = func(_ context.Context, addr string) error {
			if d := dead.Load(); strings.HasPrefix(addr, "dead-") || d != nil && *d == addr {
				return fmt.Errorf("dial %s: connection refused", addr)
			}
			return nil
		}
	})
	l := c.leader()
	c.announced(l)
	before := suffrages(t, l)
	for range 3 {
		a := c.post("/v1/cluster/join", joinBody("ghost", "ghost", deadAddr(t)))
		if a.status != 409 || a.body["code"] != api.CodeNodeUnreachable {
			t.Fatalf("join of a ghost: %d %v", a.status, a.body)
		}
	}
	if after := suffrages(t, l); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("configuration changed: %v -> %v", before, after)
	}
	if a := c.post("/v1/acquire", acquireBody("k", "a", 60000, "")); a.status != 200 {
		t.Fatalf("the cluster stopped serving: %d %v", a.status, a.body)
	}
	// A process that answers at the client address but is another node is
	// refused too.
	other := c.nodes[1]
	if other == l {
		other = c.nodes[2]
	}
	if a := c.post("/v1/cluster/join", joinBody("ghost", "ghost", other.addr)); a.status != 409 || a.body["code"] != api.CodeWrongNode {
		t.Fatalf("join naming another node's client address: %d %v", a.status, a.body)
	}
	// A raft address that accepts no connection is refused.
	n4 := c.addNode("dead-n4", func(cfg *Config) { cfg.Join = true })
	dead.Store(&n4.raft)
	if a := c.post("/v1/cluster/join", joinBody("dead-n4", n4.raft, n4.addr)); a.status != 409 || a.body["code"] != api.CodeNodeUnreachable {
		t.Fatalf("join of a node whose raft address is dead: %d %v", a.status, a.body)
	}
	if after := suffrages(t, l); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("configuration changed: %v -> %v", before, after)
	}
}

// A node that bootstrapped a cluster of its own is refused: joining it
// would mix two histories of tokens.
func TestJoinOfANodeOfAnotherClusterIsRefused(t *testing.T) {
	c := startCluster(t, 3, nil)
	l := c.leader()
	stranger := c.addNode("n4", nil) // no Join: it bootstraps itself
	(&testCluster{t: t, nodes: []*clusterNode{stranger}}).leader()
	eventually(t, "the stranger's cluster id", func() bool { return stranger.fsm.ClusterID() != "" })
	if stranger.fsm.ClusterID() == l.fsm.ClusterID() || l.fsm.ClusterID() == "" {
		t.Fatalf("cluster ids %q and %q", stranger.fsm.ClusterID(), l.fsm.ClusterID())
	}
	a := c.post("/v1/cluster/join", joinBody("n4", stranger.raft, stranger.addr))
	if a.status != 409 || a.body["code"] != api.CodeWrongCluster {
		t.Fatalf("join of another cluster's node: %d %v", a.status, a.body)
	}
	if s := suffrages(t, l); len(s) != 3 {
		t.Fatalf("configuration changed: %v", s)
	}
	if id := l.get("/v1/cluster/identity"); id.body["cluster_id"] != l.fsm.ClusterID() || id.body["node"] != l.id {
		t.Fatalf("identity: %v", id.body)
	}
	if m := l.get("/v1/cluster/members"); m.body["cluster_id"] != l.fsm.ClusterID() {
		t.Fatalf("members: %v", m.body)
	}
}

// A fresh node joins as a non-voter, catches up, and is promoted; every
// node agrees on the cluster id.
func TestJoinOfANewNodeEndsAsAVoterAfterCatchingUp(t *testing.T) {
	c := startCluster(t, 3, nil)
	l := c.leader()
	c.announced(l)
	for i := range 20 {
		if a := c.post("/v1/acquire", acquireBody(fmt.Sprintf("k%d", i), "a", 60000, "")); a.status != 200 {
			t.Fatalf("acquire: %v", a.body)
		}
	}
	n4 := c.addNode("n4", func(cfg *Config) { cfg.Join = true })
	if id := n4.get("/v1/cluster/identity"); id.status != 200 || id.body["cluster_id"] != "" {
		t.Fatalf("a fresh node's identity: %v", id.body)
	}
	a := c.post("/v1/cluster/join", joinBody("n4", n4.raft, n4.addr))
	if a.status != 200 || fmt.Sprint(a.body["joined"]) != "map[id:n4 suffrage:Voter]" {
		t.Fatalf("join: %d %v", a.status, a.body)
	}
	if s := suffrages(t, l); s["n4"] != "Voter" || len(s) != 4 {
		t.Fatalf("configuration: %v", s)
	}
	if n4.fsm.LastToken() != 20 || n4.fsm.ClusterID() != l.fsm.ClusterID() {
		t.Fatalf("n4 has token %d and cluster id %q; the leader %d and %q", n4.fsm.LastToken(), n4.fsm.ClusterID(), l.fsm.LastToken(), l.fsm.ClusterID())
	}
	// Joining it again changes nothing and says so.
	if a := c.post("/v1/cluster/join", joinBody("n4", n4.raft, n4.addr)); a.status != 200 || fmt.Sprint(a.body["joined"]) != "map[id:n4 suffrage:Voter]" {
		t.Fatalf("join again: %d %v", a.status, a.body)
	}
}

// A node that cannot catch up within the bound stays a non-voter (counted
// in no quorum) and the answer says so; a later join promotes it.
func TestJoinOfANodeThatDoesNotCatchUpLeavesItANonvoter(t *testing.T) {
	c := startCluster(t, 3, func(cfg *Config) { cfg.JoinCatchUp = 300 * time.Millisecond })
	l := c.leader()
	c.announced(l)
	needLinks(t)
	n4 := c.addNode("n4", func(cfg *Config) { cfg.Join = true })
	for _, n := range c.nodes {
		n.trans.Disconnect(n4.trans.LocalAddr()) // the cluster cannot send it the log
	}
	a := c.post("/v1/cluster/join", joinBody("n4", n4.raft, n4.addr))
	if a.status != 200 || fmt.Sprint(a.body["joined"]) != "map[id:n4 suffrage:Nonvoter]" || a.body["message"] == nil {
		t.Fatalf("join of a node that cannot catch up: %d %v", a.status, a.body)
	}
	if s := suffrages(t, l); s["n4"] != "Nonvoter" {
		t.Fatalf("configuration: %v", s)
	}
	for _, n := range c.nodes {
		n.trans.Connect(n4.trans.LocalAddr(), n4.trans)
	}
	eventually(t, "the promotion", func() bool {
		a := c.post("/v1/cluster/join", joinBody("n4", n4.raft, n4.addr))
		return a.status == 200 && fmt.Sprint(a.body["joined"]) == "map[id:n4 suffrage:Voter]"
	})
}

// A node without a raft transport cannot reach anyone: it refuses joins
// instead of adding a voter it can never talk to.
func TestJoinOnANodeWithoutRaftIsRefused(t *testing.T) {
	s := startServer(t, fastConfig(""))
	a := s.post("/v1/cluster/join", joinBody("n2", "127.0.0.1:1", deadAddr(t)))
	if a.status != 409 || a.body["code"] != api.CodeNoRaft {
		t.Fatalf("join on a node without raft: %d %v", a.status, a.body)
	}
	if a := s.post("/v1/acquire", acquireBody("k", "a", 60000, "")); a.status != 200 {
		t.Fatalf("the node stopped serving: %d %v", a.status, a.body)
	}
	if srv, err := s.node.Configuration(); err != nil || len(srv) != 1 {
		t.Fatalf("configuration: %v %v", srv, err)
	}
}

// With one of three voters down, removing another would leave one of two:
// refused, and nothing changes. Removing the dead one is fine.
func TestRemoveThatWouldLoseQuorumIsRefused(t *testing.T) {
	c := startCluster(t, 3, nil)
	l := c.leader()
	c.announced(l)
	f := c.others(l)
	f[0].stop()
	a := c.post("/v1/cluster/remove", fmt.Sprintf(`{"id":%q}`, f[1].id))
	if a.status != 409 || a.body["code"] != api.CodeNoQuorum {
		t.Fatalf("remove that loses quorum: %d %v", a.status, a.body)
	}
	if s := suffrages(t, l); len(s) != 3 {
		t.Fatalf("configuration changed: %v", s)
	}
	if a := c.post("/v1/acquire", acquireBody("k", "a", 60000, "")); a.status != 200 {
		t.Fatalf("the cluster stopped serving: %d %v", a.status, a.body)
	}
	if a := c.post("/v1/cluster/remove", fmt.Sprintf(`{"id":%q}`, f[0].id)); a.status != 200 {
		t.Fatalf("remove of the dead node: %d %v", a.status, a.body)
	}
	if s := suffrages(t, l); len(s) != 2 {
		t.Fatalf("configuration: %v", s)
	}
}

// Removing the leader hands leadership over first; the new leader does
// the removal when the call is sent there.
func TestRemoveOfTheLeaderHandsOver(t *testing.T) {
	c := startCluster(t, 3, nil)
	old := c.leader()
	c.announced(old)
	body := fmt.Sprintf(`{"id":%q}`, old.id)
	a := old.post("/v1/cluster/remove", body)
	if a.status != 503 || a.body["code"] != api.CodeNotLeader || a.body["leader"] == nil || a.body["leader"] == old.addr {
		t.Fatalf("remove of the leader: %d %v", a.status, a.body)
	}
	var nl *clusterNode
	for _, n := range c.others(old) {
		if n.addr == a.body["leader"] {
			nl = n
		}
	}
	if nl == nil {
		t.Fatalf("the answer names %v, no other node", a.body["leader"])
	}
	eventually(t, "the new leader to remove the old one", func() bool {
		return nl.post("/v1/cluster/remove", body).status == 200
	})
	if s := suffrages(t, nl); len(s) != 2 || s[old.id] != "" {
		t.Fatalf("configuration: %v", s)
	}
	if a := nl.post("/v1/acquire", acquireBody("k", "a", 60000, "")); a.status != 200 {
		t.Fatalf("the new leader does not serve: %d %v", a.status, a.body)
	}
}
