package etcd

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/fencelock/fencelock/internal/node"
	"github.com/fencelock/fencelock/internal/node/etcd/etcdcodec"
	"github.com/fencelock/fencelock/internal/replica"
	"github.com/fencelock/fencelock/internal/tlsconfig/tlstest"
)

// The etcd engine's raft port (transport): clusters of real
// listeners on loopback, plain TCP and mutual TLS.

// Three members over their raft ports: the leader dies, another is
// elected, the dead one restarts on its address and catches up, and
// every acknowledged token is on every member.
func TestEtcdTransportFailover(t *testing.T) {
	for _, tc := range []struct {
		name string
		ca   *tlstest.CA
	}{{"tcp", nil}, {"tls", tlstest.NewCA(t, "ca")}, {"secret", nil}} {
		t.Run(tc.name, func(t *testing.T) {
			var cl *etcdCluster
			if tc.name == "secret" {
				cl = newEtcdSecretCluster(t, "a", "b", "c")
			} else {
				cl = newEtcdTCPCluster(t, tc.ca, "a", "b", "c")
			}
			for i := range 10 {
				cl.grant(fmt.Sprint("k", i))
			}
			l1 := cl.leader()
			if err := cl.ms[l1].r.VerifyLeader(); err != nil {
				t.Fatalf("verify the leader %s: %v", l1, err)
			}
			healthy := map[string]replica.PeerState{}
			for _, n := range cl.names {
				if n != l1 {
					healthy[n] = replica.PeerHealthy
				}
			}
			cl.peersBecome(l1, healthy)
			if st := cl.ms[l1].n.RaftPortStats(); st.Open < 2 {
				t.Fatalf("the leader's raft port holds %d connections, want one from each follower: %+v", st.Open, st)
			}
			cl.kill(l1)
			cl.leader(l1)
			for i := range 10 {
				cl.grant(fmt.Sprint("j", i), l1)
			}
			cl.start(l1, false)
			cl.grant("after the restart")
			if err := cl.ms[cl.leader()].r.Barrier(time.Second); err != nil {
				t.Fatal(err)
			}
			cl.checkAcked()
		})
	}
}

// Membership over the raft ports: a node started to be joined learns
// where every member listens from the log, over TCP and TLS.
func TestEtcdTransportMembership(t *testing.T) {
	t.Run("tcp", func(t *testing.T) { etcdMembership(t, newEtcdTCPCluster(t, nil, "a", "b", "c")) })
	t.Run("tls", func(t *testing.T) { etcdMembership(t, newEtcdTCPCluster(t, tlstest.NewCA(t, "ca"), "a", "b", "c")) })
	t.Run("secret", func(t *testing.T) { etcdMembership(t, newEtcdSecretCluster(t, "a", "b", "c")) })
}

// peerConn dials name's raft port as a node holding leaf (nil: plain
// TCP) and sends the preamble and a hello naming the node as.
func (cl *etcdCluster) peerConn(name string, leaf *tlstest.Leaf, as string) (net.Conn, error) {
	addr := cl.addr(name)
	var c net.Conn
	var err error
	if leaf == nil {
		c, err = net.DialTimeout("tcp", addr, 5*time.Second)
	} else {
		d := &tls.Dialer{Config: &tls.Config{RootCAs: cl.ca.Pool(), ServerName: "127.0.0.1",
			Certificates: []tls.Certificate{leaf.TLS(cl.t)}}}
		d.NetDialer = &net.Dialer{Timeout: 5 * time.Second}
		c, err = d.Dial("tcp", addr)
		if err == nil {
			// A refused client certificate shows at the first read
			// in TLS 1.3.
			err = c.(*tls.Conn).Handshake()
		}
	}
	if err != nil {
		return nil, err
	}
	if _, err := c.Write(append(append([]byte{}, etcdcodec.Preamble...), etcdcodec.Hello(node.Peer{ID: as, RaftAddr: "127.0.0.1:1"})...)); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// closedByPeer waits until the other end closes c: a read that ends
// (deadline: a failure of the test, not a decision).
func closedByPeer(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := io.Copy(io.Discard, c)
	if isTimeout(err) {
		t.Fatal("the raft port kept a connection it should have closed")
	}
}

// The raft port with TLS refuses what is not a member's node: a client
// certificate, a node certificate naming no member, and a member's node
// that sends a message as another member (its connection is closed
// before raft sees the message). Without the preamble, bytes are not
// read as raft's (a node of the other engine).
func TestEtcdTransportRefuses(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	cl := newEtcdTCPCluster(t, ca, "a", "b", "c")
	cl.grant("k")
	l := cl.leader()
	victim := cl.follower()
	port := cl.ms[victim].n
	refused := port.RaftPortStats().HandshakesRefused

	for _, leaf := range []*tlstest.Leaf{ca.IssueClient(t, "a"), ca.IssueNode(t, "z"), tlstest.NewCA(t, "other").IssueNode(t, "a")} {
		c, err := cl.peerConn(victim, leaf, leaf.Cert.Subject.CommonName)
		if err == nil {
			// Refused after the client's side of the handshake: the
			// server's alert ends the connection.
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			_, err = c.Read(make([]byte, 1))
			c.Close()
		}
		if err == nil || isTimeout(err) {
			t.Fatalf("the raft port took %q (%v)", leaf.Cert.Subject.CommonName, err)
		}
	}
	// The refusal is counted after the alert that ends the dialer's
	// read has gone out: wait for the count, bounded.
	for deadline := time.Now().Add(10 * time.Second); port.RaftPortStats().HandshakesRefused < refused+3; {
		if time.Now().After(deadline) {
			t.Fatalf("handshakes refused %d, want at least %d", port.RaftPortStats().HandshakesRefused, refused+3)
		}
		time.Sleep(time.Millisecond)
	}

	// A member's node that speaks as another member: a heartbeat of a
	// far later term, which would depose everyone if raft took it.
	other := cl.follower(victim)
	term := port.Status().Term
	// A member's certificate with a hello naming another member.
	c, err := cl.peerConn(victim, ca.IssueNode(t, other), l)
	if err != nil {
		t.Fatal(err)
	}
	closedByPeer(t, c)
	c.Close()
	c, err = cl.peerConn(victim, ca.IssueNode(t, other), other)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(c)
	forged := &raftpb.Message{Type: raftpb.MsgHeartbeat.Enum(), From: proto.Uint64(etcdcodec.ID(l)), To: proto.Uint64(etcdcodec.ID(victim)),
		Term: proto.Uint64(term + 100)}
	if err := etcdcodec.WriteMsg(w, forged); err != nil || w.Flush() != nil {
		t.Fatal(err)
	}
	closedByPeer(t, c)
	c.Close()
	cl.grant("after the forgery")
	if got := port.Status().Term; got >= term+100 {
		t.Fatalf("%s took a message forged as %s's: term %d", victim, l, got)
	}

	// Not the preamble: closed and counted.
	plain := newEtcdTCPCluster(t, nil, "p")
	plain.grant("k")
	pc, err := net.DialTimeout("tcp", plain.addr("p"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pc.Write([]byte("\x00\x00\x00\x01 something else entirely")); err != nil {
		t.Fatal(err)
	}
	closedByPeer(t, pc)
	pc.Close()
	if got := plain.ms["p"].n.RaftPortStats().HandshakesRefused; got != 1 {
		t.Fatalf("refused %d connections without the preamble, want 1", got)
	}
}

// Without TLS a connection carries the node its hello names only: a
// message from another sender closes it, before raft takes the message.
func TestEtcdTransportOneSenderPerConnection(t *testing.T) {
	cl := newEtcdTCPCluster(t, nil, "a", "b", "c")
	cl.grant("k")
	l := cl.leader()
	victim := cl.follower()
	other := cl.follower(victim)
	term := cl.ms[victim].n.Status().Term
	c, err := cl.peerConn(victim, nil, other)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(c)
	for _, m := range []*raftpb.Message{
		// An answer from other (harmless), then a heartbeat claiming
		// the leader's name in a later term.
		{Type: raftpb.MsgHeartbeatResp.Enum(), From: proto.Uint64(etcdcodec.ID(other)), To: proto.Uint64(etcdcodec.ID(victim)), Term: proto.Uint64(term)},
		{Type: raftpb.MsgHeartbeat.Enum(), From: proto.Uint64(etcdcodec.ID(l)), To: proto.Uint64(etcdcodec.ID(victim)), Term: proto.Uint64(term + 100)},
	} {
		if err := etcdcodec.WriteMsg(w, m); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	closedByPeer(t, c)
	c.Close()
	cl.grant("after")
	if got := cl.ms[victim].n.Status().Term; got >= term+100 {
		t.Fatalf("%s took a second sender's message: term %d", victim, got)
	}
}

// A hello teaches a node where a member listens, within bounds: a member
// of the configuration not named yet is learned, a name the
// configuration gave is kept, a stranger is not learned, and a node
// with no configuration learns at most etcdMaxLearned names.
func TestEtcdLearnNameIsBounded(t *testing.T) {
	a, b := etcdcodec.ID("a"), etcdcodec.ID("b")
	c := &core{}
	names := map[uint64]node.Peer{a: {ID: "a", RaftAddr: "127.0.0.1:1"}}
	c.names.Store(&names)
	c.conf.Store(&raftpb.ConfState{Voters: []uint64{a}, Learners: []uint64{b}})
	c.learnName(a, node.Peer{ID: "a", RaftAddr: "127.0.0.1:666"})
	c.learnName(b, node.Peer{ID: "b", RaftAddr: "127.0.0.1:2"})
	c.learnName(etcdcodec.ID("z"), node.Peer{ID: "z", RaftAddr: "127.0.0.1:3"})
	if p, _ := c.name(a); p.RaftAddr != "127.0.0.1:1" {
		t.Errorf("a hello replaced the configuration's address of a: %+v", p)
	}
	if p, ok := c.name(b); !ok || p.RaftAddr != "127.0.0.1:2" {
		t.Errorf("the learner b was not learned: %+v %v", p, ok)
	}
	if _, ok := c.name(etcdcodec.ID("z")); ok {
		t.Error("a stranger's hello was learned")
	}

	c.conf.Store(&raftpb.ConfState{})
	for i := range 10 * etcdMaxLearned {
		id := fmt.Sprint("x", i)
		c.learnName(etcdcodec.ID(id), node.Peer{ID: id, RaftAddr: "127.0.0.1:4"})
	}
	if n := len(*c.names.Load()); n != etcdMaxLearned {
		t.Errorf("a node with no configuration learned %d names, want at most %d", n, etcdMaxLearned)
	}
}

// A member removed from the configuration is let go: every other
// member stops its writer and closes its connections, and its node is
// refused when it dials again (over TCP by its hello, over TLS at the
// handshake), however long it keeps running.
func TestEtcdTransportLetsARemovedMemberGo(t *testing.T) {
	for _, tc := range []struct {
		name string
		ca   *tlstest.CA
	}{{"tcp", nil}, {"tls", tlstest.NewCA(t, "ca")}, {"secret", nil}} {
		t.Run(tc.name, func(t *testing.T) {
			cl := newEtcdTCPCluster(t, tc.ca, "a", "b", "c")
			if tc.name == "secret" {
				cl = newEtcdSecretCluster(t, "a", "b", "c")
			}
			cl.grant("k")
			l := cl.leader()
			gone := cl.follower()
			stay := cl.follower(gone)
			id := etcdcodec.ID(gone)
			outOf := func(name string) (<-chan struct{}, bool) {
				tr := cl.ms[name].n.tr
				return tr.Writer(id), tr.Incoming(id) != nil
			}
			waitFor(t, "the leader's writer to "+gone, func() bool { p, _ := outOf(l); return p != nil })
			writer, _ := outOf(l)

			if err := cl.ms[l].r.RemoveServer(gone, 10*time.Second); err != nil {
				t.Fatal(err)
			}
			members := map[string]bool{l: true, stay: true}
			cl.configOf(l, members)
			cl.configOf(stay, members)
			cl.grant("after " + gone + " left")
			for _, name := range []string{l, stay} {
				waitFor(t, name+" to let "+gone+" go", func() bool { p, in := outOf(name); return p == nil && !in })
			}
			select {
			case <-writer:
			case <-time.After(10 * time.Second):
				t.Fatal("the leader's writer to the removed member still runs")
			}

			refused := cl.ms[l].n.RaftPortStats().HandshakesRefused
			var leaf *tlstest.Leaf
			if tc.ca != nil {
				leaf = tc.ca.IssueNode(t, gone)
			}
			c, err := cl.peerConn(l, leaf, gone)
			if err == nil {
				closedByPeer(t, c)
				c.Close()
			}
			waitFor(t, "the refusal to be counted", func() bool {
				return cl.ms[l].n.RaftPortStats().HandshakesRefused > refused
			})
			cl.grant("after " + gone + " dialed again")
			cl.kill(gone) // it applies nothing after its removal
			cl.checkAcked()
		})
	}
}

// isTimeout says whether err is a deadline that passed.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// waitFor polls cond, bounded, for what a test waits on.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// A member that restarted closed every connection it had; the next
// message another member sends it goes out on a new connection, not into
// the socket the restarted one closed (where it was lost: in an election
// between followers, which talk to each other only then, the first
// answer to a restarted member waited for raft's next timer).
func TestEtcdTransportRedialsAPeerThatClosed(t *testing.T) {
	cl := newEtcdTCPCluster(t, nil, "a", "b", "c")
	cl.grant("k")
	from := cl.follower()
	to := cl.follower(from)
	sendOne := func() {
		term := cl.ms[to].n.Status().Term
		cl.ms[from].n.tr.Send([]*raftpb.Message{{Type: raftpb.MsgHeartbeatResp.Enum(),
			From: proto.Uint64(etcdcodec.ID(from)), To: proto.Uint64(etcdcodec.ID(to)), Term: proto.Uint64(term)}})
	}
	holdsFrom := func() bool {
		return cl.ms[to].n.tr.Incoming(etcdcodec.ID(from)) != nil
	}
	sendOne()
	waitFor(t, "a connection from "+from+" to "+to, holdsFrom)
	cl.kill(to)
	cl.start(to, false)
	// The restarted member takes in its log again (closing whatever came
	// from a member its replay has not added yet), and closes any
	// connection from `from` that is left (an election's answer to it,
	// say): then `from`'s last connection to it is closed at its end, and
	// `from` has seen it.
	cl.grant("after the restart")
	cl.awaitApplied(to, cl.ms[cl.leader()].n.CommitIndex())
	if c := cl.ms[to].n.tr.Incoming(etcdcodec.ID(from)); c != nil {
		c.Close()
	}
	waitFor(t, from+" to see its connection to "+to+" closed", func() bool {
		return cl.ms[from].n.tr.PeerClosed(etcdcodec.ID(to))
	})
	waitFor(t, to+" to let the closed connection go", func() bool { return !holdsFrom() })
	sendOne() // one message only: a second would redial in any case
	waitFor(t, "a new connection from "+from+" to the restarted "+to, holdsFrom)
}
