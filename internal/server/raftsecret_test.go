package server

import (
	"bufio"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/clustersecret"
	"github.com/fencelock/fencelock/internal/fsm"
)

// The raft port gives nothing to a process without the cluster's
// credential (issue 41): clusters on real raft ports on loopback, on
// either engine (FENCELOCK_TEST_ENGINE), attacked the way the finding
// did it.

// startPortCluster starts n voters from a static peer list, each with a
// raft port on loopback, tweak applied to each node's Config.
func startPortCluster(t *testing.T, n int, tweak func(*Config)) []*tlsNode {
	t.Helper()
	var peers []Peer
	rafts := make([]net.Listener, n)
	for i := range n {
		rafts[i] = listen(t)
		peers = append(peers, Peer{ID: fmt.Sprintf("n%d", i+1), RaftAddr: rafts[i].Addr().String()})
	}
	nodes := make([]*tlsNode, n)
	for i := range n {
		cfg := clusterConfig(peers[i].ID)
		cfg.RaftAddr, cfg.raftListener, cfg.Peers = peers[i].RaftAddr, rafts[i], peers
		if tweak != nil {
			tweak(&cfg)
		}
		nodes[i] = serveTLSNode(t, cfg, listen(t))
	}
	return nodes
}

// follower is a node of nodes that does not lead l's cluster.
func followerOf(nodes []*tlsNode, l *tlsNode) *tlsNode {
	for _, n := range nodes {
		if n != l {
			return n
		}
	}
	return nil
}

func plainDial(addr string) (net.Conn, error) { return net.DialTimeout("tcp", addr, 5*time.Second) }

// forgeEtcdRelease writes to target's raft port, over c, what the etcd
// engine's transport sends: its preamble, a hello naming the member
// from, and a MsgApp of a newer term from it whose one entry releases
// key's lease, committed at once. It returns whatever error the writes
// met; what target does with it is for the caller to see.
func forgeEtcdRelease(t *testing.T, c net.Conn, target *tlsNode, from, key, holder string) error {
	t.Helper()
	etcdID := func(id string) uint64 {
		h := fnv.New64a()
		h.Write([]byte(id))
		return h.Sum64()
	}
	cmd, err := fsm.Encode(fsm.Command{Op: fsm.OpRelease, Now: target.fsm.Now(), Key: key, Holder: holder})
	if err != nil {
		t.Fatal(err)
	}
	data := binary.BigEndian.AppendUint64(nil, 1<<62) // a proposal id nobody waits for
	data = append(data, cmd...)
	term, last := target.node.Status().Term, target.node.AppliedIndex()
	m := &raftpb.Message{Type: raftpb.MsgApp.Enum(), From: proto.Uint64(etcdID(from)), To: proto.Uint64(etcdID(target.id)),
		Term: proto.Uint64(term + 1), LogTerm: proto.Uint64(term), Index: proto.Uint64(last), Commit: proto.Uint64(last + 1),
		Entries: []*raftpb.Entry{{Index: proto.Uint64(last + 1), Term: proto.Uint64(term + 1), Type: raftpb.EntryNormal.Enum(), Data: data}}}
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(c)
	w.WriteString("fencelock-etcd-raft/1\n")
	hello := binary.BigEndian.AppendUint16(nil, uint16(len(from)))
	hello = append(hello, from...)
	hello = binary.BigEndian.AppendUint16(hello, 0)
	w.Write(hello)
	w.Write(binary.BigEndian.AppendUint32(nil, uint32(len(b))))
	w.Write(b)
	return w.Flush()
}

// forgeReleaseAny forges the release of key's lease on target as an
// attacker who dials with dial: hashicorp/raft's own NetworkTransport
// sending an AppendEntries, or raw etcd-engine frames after a hello
// naming the leader l. It says whether the port answered (hashicorp) or
// took the bytes (etcd); either way the caller checks what was applied.
func forgeReleaseAny(t *testing.T, target, l *tlsNode, key, holder string, dial func(string) (net.Conn, error)) error {
	t.Helper()
	if !etcdEngine() {
		_, err := forgeRelease(t, target, key, holder, dial)
		return err
	}
	c, err := dial(target.node.Addr())
	if err != nil {
		return err
	}
	defer c.Close()
	if err := forgeEtcdRelease(t, c, target, l.id, key, holder); err != nil {
		return err
	}
	// The port closes a connection it refuses; one it takes stays open.
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err != nil && !isTimeoutErr(err) {
		return err
	}
	return nil
}

func isTimeoutErr(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// holdsLease says whether n has applied holder's lease on key with
// token.
func holdsLease(n *tlsNode, key, holder string, token uint64) bool {
	ls, ok := n.fsm.Get(key, n.fsm.Now())
	return ok && ls.Holder == holder && ls.Token == token
}

// secretDial dials as a node holding sec, named id: its proof of the
// secret, then TLS with its certificate. Blind, it takes whatever node
// answers, so that the node's check is what decides.
func secretDial(t *testing.T, sec clustersecret.Secret, id string, blind bool) func(string) (net.Conn, error) {
	t.Helper()
	cred, err := clustersecret.NewCredential(sec, nil, id)
	if err != nil {
		t.Fatal(err)
	}
	cfg := cred.PeerClient("", nil)
	if blind {
		cfg = &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{cred.Certificate()}}
	}
	return func(addr string) (net.Conn, error) {
		proof, err := cred.Proof()
		if err != nil {
			return nil, err
		}
		return proofDial(proof, cfg)(addr)
	}
}

// proofDial dials, sends proof (nil: none) and runs a TLS handshake
// with cfg.
func proofDial(proof []byte, cfg *tls.Config) func(string) (net.Conn, error) {
	return func(addr string) (net.Conn, error) {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			return nil, err
		}
		if _, err := c.Write(proof); err != nil {
			c.Close()
			return nil, err
		}
		tc := tls.Client(c, cfg)
		if err := tc.Handshake(); err != nil {
			c.Close()
			return nil, err
		}
		return tc, nil
	}
}

// settle writes through the leader and waits for every node to apply
// it: whatever a forgery before it did is then in every node's log, or
// in none.
func settle(t *testing.T, nodes []*tlsNode, key string) {
	t.Helper()
	acquireOnLeaderHTTP(t, nodes, key, "b")
	for _, n := range nodes {
		eventually(t, n.id+" to apply "+key, func() bool {
			ls, ok := n.fsm.Get(key, n.fsm.Now())
			return ok && ls.Holder == "b"
		})
	}
}

// The finding: any process that can reach a raft port forges log
// entries (hashicorp/raft's own NetworkTransport sending AppendEntries;
// raw etcd-engine frames after a hello naming the leader). A cluster
// started as its helper starts one, with a cluster secret, refuses a
// process without it, or with another secret, at the handshake, on
// either engine, and counts it; nothing is applied: a held lease stays
// held on every node. The same forgery from a holder of the secret is
// applied: what keeps the others out is the secret.
func TestRaftPortRefusesAForgerWithoutTheCredential(t *testing.T) {
	nodes := startPortCluster(t, 3, nil)
	acquireOnLeaderHTTP(t, nodes, "k", "a")
	for _, n := range nodes {
		eventually(t, n.id+" to apply the grant", func() bool { return holdsLease(n, "k", "a", 1) })
	}
	other, err := clustersecret.New()
	if err != nil {
		t.Fatal(err)
	}
	otherCred, err := clustersecret.NewCredential(other, nil, "n1")
	if err != nil {
		t.Fatal(err)
	}
	// A member's proof, as one who reads the raft traffic has it.
	sniffed := func() []byte {
		c, err := clustersecret.NewCredential(*testSecret, nil, "n1")
		if err != nil {
			t.Fatal(err)
		}
		p, err := c.Proof()
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	for i, a := range []struct {
		name string
		dial func(string) (net.Conn, error)
	}{
		{"plain TCP", plainDial},
		{"TLS without a certificate", tlsDialer(&tls.Config{InsecureSkipVerify: true})},
		{"another cluster's secret", secretDial(t, other, "n1", true)},
		{"a member's proof replayed, then another secret's certificate", proofDial(sniffed(),
			&tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{otherCred.Certificate()}})},
	} {
		l := tlsLeader(t, nodes)
		target := followerOf(nodes, l)
		refused := target.node.RaftPortStats().HandshakesRefused
		err := forgeReleaseAny(t, target, l, "k", "a", a.dial)
		t.Logf("%s: the forgery: %v", a.name, err)
		settle(t, nodes, fmt.Sprint("after", i))
		for _, n := range nodes {
			if !holdsLease(n, "k", "a", 1) {
				ls, ok := n.fsm.Get("k", n.fsm.Now())
				t.Errorf("%s: %s after the forgery: lease %+v held %v, want a's token 1", a.name, n.id, ls, ok)
			}
		}
		if got := target.node.RaftPortStats().HandshakesRefused; got <= refused {
			t.Errorf("%s: handshakes refused on %s: %d before, %d after; want the forger counted", a.name, target.id, refused, got)
		}
	}
	// The secret lets the same forgery in.
	eventually(t, "a forgery with the cluster's secret to be applied", func() bool {
		l := tlsLeader(t, nodes)
		forgeReleaseAny(t, followerOf(nodes, l), l, "k", "a", secretDial(t, *testSecret, l.id, false))
		for _, n := range nodes {
			if !holdsLease(n, "k", "a", 1) {
				return true
			}
		}
		return false
	})
}

// --insecure-raft still runs a cluster, says so at start, and is what
// the finding was: a process without any credential releases a held
// lease.
func TestInsecureRaftRunsOpenAndWarns(t *testing.T) {
	var logs syncLog
	nodes := startPortCluster(t, 3, func(cfg *Config) {
		cfg.ClusterSecret, cfg.InsecureRaft = nil, true
		cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	})
	if got := logs.String(); strings.Count(got, "raft port without a credential (--insecure-raft)") != 3 {
		t.Fatalf("want one warning per node, logged:\n%s", got)
	}
	acquireOnLeaderHTTP(t, nodes, "k", "a")
	for _, n := range nodes {
		eventually(t, n.id+" to apply the grant", func() bool { return holdsLease(n, "k", "a", 1) })
	}
	eventually(t, "the forgery over plain TCP to be applied", func() bool {
		l := tlsLeader(t, nodes)
		target := followerOf(nodes, l)
		err := forgeReleaseAny(t, target, l, "k", "a", plainDial)
		if !holdsLease(target, "k", "a", 1) {
			t.Logf("the forgery over plain TCP (%v) released %s's lease on %s", err, "a", target.id)
			return true
		}
		return false
	})
}

// syncLog is a log sink several nodes write at once.
type syncLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// acquireOnLeaderHTTP is acquireOnLeader over plain HTTP.
func acquireOnLeaderHTTP(t *testing.T, nodes []*tlsNode, key, holder string) {
	t.Helper()
	body := acquireBody(key, holder, 24*3600*1000, "raftsecret-"+key)
	eventually(t, "an acquire answered by the leader", func() bool {
		st, m := postJSON(t, httpsClient(nil), "http://"+tlsLeader(t, nodes).addr+api.PathAcquire, body)
		if st != 200 && st != 503 {
			t.Fatalf("acquire: %d %v", st, m)
		}
		return st == 200
	})
}

// newSecret is a fresh cluster secret.
func newSecret(t *testing.T) *clustersecret.Secret {
	t.Helper()
	s, err := clustersecret.New()
	if err != nil {
		t.Fatal(err)
	}
	return &s
}

// Joining needs the cluster's secret: the leader's probe of a node with
// another secret fails at the handshake, the join is refused and nothing
// changes; the same node with the secret joins and replicates.
func TestRaftPortJoinNeedsTheSecret(t *testing.T) {
	rln := listen(t)
	cfg := clusterConfig("n1")
	cfg.RaftAddr, cfg.raftListener = rln.Addr().String(), rln
	l := tlsLeader(t, []*tlsNode{serveTLSNode(t, cfg, listen(t))})
	acquireOnLeaderHTTP(t, []*tlsNode{l}, "k", "a")

	join := func(n *tlsNode) (int, map[string]any) {
		body := `{"id":"` + n.id + `","raft_addr":"` + n.node.Addr() + `","client_addr":"` + n.addr + `"}`
		return postJSON(t, httpsClient(nil), "http://"+l.addr+api.PathJoin, body)
	}
	rln = listen(t)
	cfg = clusterConfig("n2")
	cfg.RaftAddr, cfg.raftListener, cfg.Join, cfg.ClusterSecret = rln.Addr().String(), rln, true, newSecret(t)
	stranger := serveTLSNode(t, cfg, listen(t))
	if st, m := join(stranger); st == 200 || m["code"] != api.CodeNodeUnreachable {
		t.Fatalf("join of a node with another secret: %d %v", st, m)
	}
	if ms := l.fsm.Members(); len(ms) != 1 {
		t.Fatalf("members after the refused join: %v", ms)
	}
	stranger.stop()

	rln = listen(t)
	cfg = clusterConfig("n2")
	cfg.RaftAddr, cfg.raftListener, cfg.Join = rln.Addr().String(), rln, true
	n2 := serveTLSNode(t, cfg, listen(t))
	eventually(t, "the join with the secret", func() bool {
		st, m := join(n2)
		if st != 200 && st != 503 {
			t.Fatalf("join of n2 with the secret: %d %v", st, m)
		}
		return st == 200
	})
	eventually(t, "n2 to replicate", func() bool { return holdsLease(n2, "k", "a", 1) })
}

// The window of a rotation: a node on the new secret that still accepts
// the old one, and nodes on the old one alone, form one cluster; a node
// on the new secret alone is refused by those on the old one alone.
func TestRaftPortRotationWindow(t *testing.T) {
	oldS, newS := testSecret, newSecret(t)
	nodes := startPortCluster(t, 3, func(cfg *Config) {
		if cfg.NodeID == "n1" {
			cfg.ClusterSecret, cfg.PreviousClusterSecret = newS, oldS
		}
	})
	// n1 leads, so that it dials the others, and is dialed by them
	// before that.
	eventually(t, "n1, on both secrets, to lead", func() bool {
		l := tlsLeader(t, nodes)
		if l == nodes[0] {
			return true
		}
		l.node.TransferLeadership()
		return false
	})
	acquireOnLeaderHTTP(t, nodes, "k", "a")
	for _, n := range nodes {
		eventually(t, n.id+" to apply the grant", func() bool { return holdsLease(n, "k", "a", 1) })
	}
	n3 := nodes[2]
	refused := n3.node.RaftPortStats().HandshakesRefused
	forgeReleaseAny(t, n3, nodes[0], "k", "a", secretDial(t, *newS, "n1", false))
	if got := n3.node.RaftPortStats().HandshakesRefused; got <= refused {
		t.Errorf("a dialer with the new secret alone was not refused by a node on the old one alone (refused %d, then %d)", refused, got)
	}
	settle(t, nodes, "after")
	for _, n := range nodes {
		if !holdsLease(n, "k", "a", 1) {
			t.Errorf("%s lost a's lease", n.id)
		}
	}
}
