package server

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fencelock/fencelock/internal/tlsconfig/tlstest"
)

// The raft port takes nodes of the configuration only (issue 24, item 1):
// a certificate from the cluster's CA is not enough.

// tlsDialer dials with cfg, for forgeRelease.
func tlsDialer(cfg *tls.Config) func(string) (net.Conn, error) {
	return func(addr string) (net.Conn, error) {
		return tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	}
}

// forgeVote asks target for its vote in a term after its own, as a
// candidate named id whose log is as long as target's.
func forgeVote(t *testing.T, target *tlsNode, id string, dial func(addr string) (net.Conn, error)) (*raft.RequestVoteResponse, error) {
	t.Helper()
	trans := raft.NewNetworkTransport(dialStream{Listener: listen(t), dial: dial}, 1, 5*time.Second, io.Discard)
	defer trans.Close()
	st := target.raftNode(t).Stats()
	num := func(k string) uint64 {
		v, err := strconv.ParseUint(st[k], 10, 64)
		if err != nil {
			t.Fatalf("raft stats %s: %q", k, st[k])
		}
		return v
	}
	req := &raft.RequestVoteRequest{
		RPCHeader:          raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(id), Addr: []byte(trans.LocalAddr())},
		Term:               num("term") + 1,
		LastLogIndex:       num("last_log_index") + 1000,
		LastLogTerm:        num("last_log_term") + 1,
		LeadershipTransfer: true, // asks even a follower that hears from its leader
	}
	var resp raft.RequestVoteResponse
	err := trans.RequestVote(raft.ServerID("n-target"), raft.ServerAddress(target.node.Addr()), req, &resp)
	return &resp, err
}

func TestTLSRaftPortRefusesClientCertificatesAndNonMembers(t *testing.T) {
	ca := tlstest.NewCA(t, "cluster CA")
	nodes := startTLSCluster(t, 3, ca)
	hc := httpsClient(ca.Pool())
	acquireOnLeader(t, nodes, hc, "k", "a", 24*3600*1000)
	l := tlsLeader(t, nodes)
	var target *tlsNode
	for _, n := range nodes {
		if n != l {
			target = n
		}
	}
	for _, n := range nodes {
		eventually(t, n.id+" to apply the grant", func() bool {
			ls, ok := n.fsm.Get("k", n.fsm.Now())
			return ok && ls.Holder == "a"
		})
	}
	with := func(l *tlstest.Leaf) func(string) (net.Conn, error) {
		return tlsDialer(&tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{l.TLS(t)}})
	}
	for _, a := range []struct {
		name string
		leaf *tlstest.Leaf
	}{
		// alice.pem of docs/SECURITY.md: the cluster's CA, clientAuth only.
		{"a client certificate", ca.IssueClient(t, "alice")},
		// Named like a member, but still only good for client auth.
		{"a client certificate named like a member", ca.IssueClient(t, target.id)},
		// A node's certificate, but of no node of this configuration.
		{"a node certificate of no member", ca.Issue(t, "n9")},
		{"a node certificate whose URI names no member", ca.IssueTemplate(t, &x509.Certificate{
			Subject:     pkix.Name{CommonName: target.id},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
			URIs:        []*url.URL{{Scheme: "fencelock", Host: "node", Path: "/n9"}},
		})},
		// The CA's certificate for a member, but without an extended key
		// usage (x509 reads that as any use; issue 41, item 4).
		{"a member's certificate with no extended key usage", ca.IssueTemplate(t, &x509.Certificate{
			Subject: pkix.Name{CommonName: l.id},
			URIs:    []*url.URL{{Scheme: "fencelock", Host: "node", Path: "/" + l.id}},
		})},
	} {
		if resp, err := forgeRelease(t, target, "k", "a", with(a.leaf)); err == nil {
			t.Errorf("%s: the forged AppendEntries was answered (success %v, term %d)", a.name, resp.Success, resp.Term)
		}
		if resp, err := forgeVote(t, target, "mallory", with(a.leaf)); err == nil {
			t.Errorf("%s: the forged RequestVote was answered (granted %v)", a.name, resp.Granted)
		}
	}
	for _, n := range nodes {
		ls, ok := n.fsm.Get("k", n.fsm.Now())
		if !ok || ls.Holder != "a" || ls.Token != 1 {
			t.Errorf("%s after the forgeries: lease %+v held %v, want a's token 1", n.id, ls, ok)
		}
	}
	// The TLS alert reaches the dialer before the port counts it.
	eventually(t, "the refused handshakes counted", func() bool { return target.node.RaftPortStats().HandshakesRefused >= 8 })

	// What is let in is a member's certificate, by CN or by the URI SAN:
	// the same forgery from a certificate naming a node of the
	// configuration (a compromised node) is applied, so what kept the
	// others out is the name and the usage.
	member := ca.IssueNode(t, l.id)
	eventually(t, "a member's forgery to be applied", func() bool {
		if _, err := forgeRelease(t, target, "k", "a", with(member)); err != nil {
			t.Fatalf("a member's certificate: %v", err)
		}
		_, ok := target.fsm.Get("k", target.fsm.Now())
		return !ok
	})
}

// A join probes the new node's raft port with a handshake that wants the
// node being joined: a node certificate of the CA naming another node is
// refused, and nothing changes.
func TestTLSJoinRefusesANodeWhoseCertificateNamesAnother(t *testing.T) {
	ca := tlstest.NewCA(t, "cluster CA")
	rln := listen(t)
	cfg := clusterConfig("n1")
	cfg.RaftAddr, cfg.raftListener = rln.Addr().String(), rln
	cfg.TLS = nodeFiles(t, ca, "n1")
	n1 := serveTLSNode(t, cfg, listen(t))
	l := tlsLeader(t, []*tlsNode{n1})

	rln = listen(t)
	cfg = clusterConfig("n2")
	cfg.RaftAddr, cfg.raftListener, cfg.Join = rln.Addr().String(), rln, true
	f := tlstest.Write(t, t.TempDir(), "n2", ca, ca.Issue(t, "n7")) // names n7, runs as n2
	cfg.TLS.CertFile, cfg.TLS.KeyFile, cfg.TLS.CAFile = f.Cert, f.Key, f.CA
	n2 := serveTLSNode(t, cfg, listen(t))
	body := `{"id":"n2","raft_addr":"` + n2.node.Addr() + `","client_addr":"` + n2.addr + `"}`
	st, m := postJSON(t, httpsClient(ca.Pool()), "https://"+l.addr+"/v1/cluster/join", body)
	if msg, _ := m["error"].(string); st == 200 || m["code"] != "node_unreachable" || !strings.Contains(msg, "n7") {
		t.Fatalf("join of n2 with a certificate naming n7: %d %v", st, m)
	}
	if ms := l.fsm.Members(); len(ms) != 1 {
		t.Fatalf("members after the refused join: %v", ms)
	}
}
