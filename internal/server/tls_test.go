package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/framing"
	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/tlsconfig"
	"github.com/fencelock/fencelock/internal/tlsconfig/tlstest"
)

// tlsNode is a node serving TLS on its client port the way Serve does
// (TLS first, then HTTP and frames sorted on one port) and, in a
// cluster, raft over TLS.
type tlsNode struct {
	*Server
	id, addr string // addr: client host:port
	files    tlsconfig.Files
	stop     func() // shuts it down, once (also at cleanup)
}

func nodeFiles(t *testing.T, ca *tlstest.CA, name string) tlsconfig.Files {
	t.Helper()
	f := tlstest.Write(t, t.TempDir(), name, ca, ca.Issue(t, name))
	return tlsconfig.Files{CertFile: f.Cert, KeyFile: f.Key, CAFile: f.CA}
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// serveTLSNode starts cfg on ln, as Serve would, and stops it at cleanup.
func serveTLSNode(t *testing.T, cfg Config, ln net.Listener) *tlsNode {
	t.Helper()
	cfg.ClientAddr = ln.Addr().String()
	if cfg.TLS.CAFile != "" {
		// The TLS tests are of raft over the CA's certificates, which a
		// cluster secret would take the place of.
		cfg.ClusterSecret = nil
	}
	s, err := New(cfg)
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	hs := &http.Server{Handler: s.Handler()}
	fs := &framing.Server{Handler: s.Handler()}
	go hs.Serve(framing.Listen(s.wrapListener(ln), fs))
	var once sync.Once
	stop := func() {
		once.Do(func() {
			s.BeginShutdown()
			hs.Close()
			fs.Close()
			s.Close()
		})
	}
	t.Cleanup(stop)
	return &tlsNode{Server: s, id: cfg.NodeID, addr: cfg.ClientAddr, files: cfg.TLS, stop: stop}
}

// startTLSCluster starts n voters with raft over TLS, every certificate
// from ca.
func startTLSCluster(t *testing.T, n int, ca *tlstest.CA) []*tlsNode {
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
		cfg.TLS = nodeFiles(t, ca, peers[i].ID)
		nodes[i] = serveTLSNode(t, cfg, listen(t))
	}
	return nodes
}

// acquireOnLeader posts an acquire (one request id: retries apply once)
// to whichever node leads, retrying 503s: on two loaded cores a cluster
// may elect again right after its first election.
func acquireOnLeader(t *testing.T, nodes []*tlsNode, hc *http.Client, key, holder string, ttlMs int) map[string]any {
	t.Helper()
	body := acquireBody(key, holder, ttlMs, "tls-test-"+key)
	var out map[string]any
	eventually(t, "an acquire answered by the leader", func() bool {
		st, m := postJSON(t, hc, "https://"+tlsLeader(t, nodes).addr+api.PathAcquire, body)
		if st != 200 && st != 503 {
			t.Fatalf("acquire: %d %v", st, m)
		}
		out = m
		return st == 200
	})
	return out
}

func tlsLeader(t *testing.T, nodes []*tlsNode) *tlsNode {
	t.Helper()
	var l *tlsNode
	eventually(t, "a leader over the TLS transport", func() bool {
		for _, n := range nodes {
			if n.Ready() {
				l = n
				return true
			}
		}
		return false
	})
	return l
}

// httpsClient trusts ca and presents cert, if any.
func httpsClient(ca *x509.CertPool, cert ...tls.Certificate) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: ca, Certificates: cert},
	}}
}

func postJSON(t *testing.T, hc *http.Client, url, body string) (int, map[string]any) {
	t.Helper()
	resp, err := hc.Post(url, api.ContentType, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var m map[string]any
	json.Unmarshal(data, &m)
	return resp.StatusCode, m
}

// framedTLS makes a framed connection over TLS.
func framedTLS(ctx context.Context, addr string, cfg *tls.Config) (*framing.Conn, error) {
	c, err := (&tls.Dialer{Config: cfg}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return framing.Start(ctx, c)
}

// serveTLSReady runs a single TLS node through Serve, as the server
// command does, until the test ends, and returns its address and the CA
// once it is ready.
func serveTLSReady(t *testing.T) (addr string, ca *tlstest.CA) {
	t.Helper()
	ca = tlstest.NewCA(t, "cluster CA")
	cfg := fastConfig("")
	cfg.TLS = nodeFiles(t, ca, "n1")
	ln := listen(t)
	addr = ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, ln, cfg, 5*time.Second) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	hc := httpsClient(ca.Pool())
	eventually(t, "the TLS server to be ready", func() bool {
		resp, err := hc.Get("https://" + addr + api.PathReady)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	return addr, ca
}

func TestTLSClientPortServesHTTPAndFramedConnections(t *testing.T) {
	addr, ca := serveTLSReady(t)
	ctx := context.Background()
	hc := httpsClient(ca.Pool())
	if st, m := postJSON(t, hc, "https://"+addr+api.PathAcquire, acquireBody("k", "a", 60000, "")); st != 200 || m["token"] != 1.0 {
		t.Fatalf("acquire over HTTPS: %d %v", st, m)
	}
	fc, err := framedTLS(ctx, addr, &tls.Config{RootCAs: ca.Pool()})
	if err != nil {
		t.Fatalf("framed over TLS: %v", err)
	}
	defer fc.Close()
	st, body, err := fc.RoundTrip(ctx, http.MethodPost, api.PathAcquire, []byte(acquireBody("j", "b", 60000, "")))
	if err != nil || st != 200 || !bytes.Contains(body, []byte(`"token":2`)) {
		t.Fatalf("acquire over framed TLS: %d %s %v", st, body, err)
	}

	// Plain HTTP and plain frames to the TLS port get no answer.
	if resp, err := http.Get("http://" + addr + api.PathReady); err == nil {
		resp.Body.Close()
		t.Fatalf("plain HTTP to the TLS port answered %d", resp.StatusCode)
	}
	dctx, dcancel := context.WithTimeout(ctx, 5*time.Second)
	defer dcancel()
	if c, err := framing.Dial(dctx, addr); err == nil {
		c.Close()
		t.Fatal("a plain framed connection to the TLS port was accepted")
	}
}

func TestTLSClientWithoutTheCAFailsVerification(t *testing.T) {
	ca := tlstest.NewCA(t, "cluster CA")
	cfg := fastConfig("")
	cfg.TLS = nodeFiles(t, ca, "n1")
	n := serveTLSNode(t, cfg, listen(t))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// The system's roots, and another CA: neither trusts the server.
	other := tlstest.NewCA(t, "another CA")
	for name, hc := range map[string]*http.Client{
		"system roots": httpsClient(nil),
		"another CA":   httpsClient(other.Pool()),
	} {
		_, err := hc.Get("https://" + n.addr + api.PathHealth)
		var unknown x509.UnknownAuthorityError
		if !errors.As(err, &unknown) {
			t.Errorf("%s: GET over HTTPS: %v, want an unknown authority error", name, err)
		}
	}
	_, err := framedTLS(ctx, n.addr, &tls.Config{RootCAs: other.Pool()})
	var unknown x509.UnknownAuthorityError
	if !errors.As(err, &unknown) {
		t.Errorf("framed over TLS trusting another CA: %v, want an unknown authority error", err)
	}
}

func TestTLSClientPortCanRequireAClientCertificate(t *testing.T) {
	ca := tlstest.NewCA(t, "cluster CA")
	cfg := fastConfig("")
	cfg.TLS = nodeFiles(t, ca, "n1")
	cfg.TLS.RequireClientCert = true
	n := serveTLSNode(t, cfg, listen(t))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := n.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if resp, err := httpsClient(ca.Pool()).Get("https://" + n.addr + api.PathHealth); err == nil {
		resp.Body.Close()
		t.Fatalf("a client without a certificate was answered %d", resp.StatusCode)
	}
	rogue := tlstest.NewCA(t, "rogue CA").Issue(t, "mallory").TLS(t)
	if resp, err := httpsClient(ca.Pool(), rogue).Get("https://" + n.addr + api.PathHealth); err == nil {
		resp.Body.Close()
		t.Fatalf("a client with another CA's certificate was answered %d", resp.StatusCode)
	}
	good := ca.Issue(t, "alice").TLS(t)
	if st, m := postJSON(t, httpsClient(ca.Pool(), good), "https://"+n.addr+api.PathAcquire, acquireBody("k", "a", 60000, "")); st != 200 {
		t.Fatalf("acquire with a client certificate: %d %v", st, m)
	}
}

func TestTLSClusterElectsAndReplicatesOverTheTLSRaftTransport(t *testing.T) {
	ca := tlstest.NewCA(t, "cluster CA")
	nodes := startTLSCluster(t, 3, ca)
	hc := httpsClient(ca.Pool())
	if m := acquireOnLeader(t, nodes, hc, "k", "a", 60000); m["token"] != 1.0 {
		t.Fatalf("acquire on the leader: %v", m)
	}
	for _, n := range nodes {
		eventually(t, n.id+" to apply the grant", func() bool {
			ls, ok := n.fsm.Get("k", n.fsm.Now())
			return ok && ls.Holder == "a" && ls.Token == 1
		})
	}
	l := tlsLeader(t, nodes)
	// A follower names the leader, and its announcement (over HTTPS with
	// its certificate) reached it: every member's client address is known.
	eventually(t, "every member's client address", func() bool {
		ms := l.fsm.Members()
		if len(ms) != 3 {
			return false
		}
		for _, m := range ms {
			if m.ClientAddr == "" {
				return false
			}
		}
		return true
	})
}

// dialStream is a raft StreamLayer that only dials, for an attacker.
type dialStream struct {
	net.Listener
	dial func(addr string) (net.Conn, error)
}

func (d dialStream) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return d.dial(string(addr))
}

// forgeRelease sends target a forged AppendEntries, as a leader of a
// newer term would, whose one entry releases key's lease, committed at
// once. It answers raft's result.
func forgeRelease(t *testing.T, target *tlsNode, key, holder string, dial func(addr string) (net.Conn, error)) (*raft.AppendEntriesResponse, error) {
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
	term, last, lastTerm := num("term"), num("last_log_index"), num("last_log_term")
	data, err := fsm.Encode(fsm.Command{Op: fsm.OpRelease, Now: target.fsm.Now(), Key: key, Holder: holder})
	if err != nil {
		t.Fatal(err)
	}
	req := &raft.AppendEntriesRequest{
		RPCHeader:         raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("mallory"), Addr: []byte(trans.LocalAddr())},
		Term:              term + 1,
		PrevLogEntry:      last,
		PrevLogTerm:       lastTerm,
		Entries:           []*raft.Log{{Index: last + 1, Term: term + 1, Type: raft.LogCommand, Data: data}},
		LeaderCommitIndex: last + 1,
	}
	var resp raft.AppendEntriesResponse
	err = trans.AppendEntries("n-target", raft.ServerAddress(target.node.Addr()), req, &resp)
	return &resp, err
}

func TestTLSRaftPortRefusesAPeerWithoutAClusterCertificate(t *testing.T) {
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

	rogueCA := tlstest.NewCA(t, "rogue CA")
	rogue := rogueCA.Issue(t, "mallory").TLS(t)
	tlsDial := func(cfg *tls.Config) func(string) (net.Conn, error) {
		return func(addr string) (net.Conn, error) {
			return tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
		}
	}
	for _, a := range []struct {
		name string
		dial func(string) (net.Conn, error)
	}{
		{"plain TCP", func(addr string) (net.Conn, error) { return net.DialTimeout("tcp", addr, 5*time.Second) }},
		{"TLS without a certificate", tlsDial(&tls.Config{RootCAs: ca.Pool()})},
		{"TLS with another CA's certificate", tlsDial(&tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{rogue}})},
	} {
		resp, err := forgeRelease(t, target, "k", "a", a.dial)
		if err == nil {
			t.Errorf("%s: the forged AppendEntries was answered (success %v, term %d)", a.name, resp.Success, resp.Term)
		}
	}
	// The handshake itself says why: a TLS peer without a certificate is
	// told one is required before raft reads a byte.
	c, err := tls.Dial("tcp", string(raft.ServerAddress(target.node.Addr())), &tls.Config{RootCAs: ca.Pool()})
	if err == nil {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = c.Read(make([]byte, 1))
		c.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "certificate required") {
		t.Errorf("TLS without a certificate: %v, want the server's certificate required alert", err)
	}
	for _, n := range nodes {
		ls, ok := n.fsm.Get("k", n.fsm.Now())
		if !ok || ls.Holder != "a" || ls.Token != 1 {
			t.Errorf("%s after the forgeries: lease %+v held %v, want a's token 1", n.id, ls, ok)
		}
	}
	// Nor did any node take the forger for its leader.
	for _, n := range nodes {
		if n.node.Status().LeaderID == "mallory" {
			t.Errorf("%s follows the forger", n.id)
		}
	}

	// The forgery is real: sent with a certificate from the cluster's CA
	// naming a member (a compromised node's), the same request releases
	// the lease on the target. So what kept it out above is the handshake.
	insider := tlsDial(&tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{ca.Issue(t, l.id).TLS(t)}})
	eventually(t, "the insider's forgery to be applied", func() bool {
		if _, err := forgeRelease(t, target, "k", "a", insider); err != nil {
			t.Fatalf("insider: %v", err)
		}
		_, ok := target.fsm.Get("k", target.fsm.Now())
		return !ok
	})
}

func TestTLSReloadPresentsTheNewCertificate(t *testing.T) {
	ca := tlstest.NewCA(t, "cluster CA")
	cfg := fastConfig("")
	cfg.TLS = nodeFiles(t, ca, "n1")
	reload := make(chan struct{})
	cfg.TLSReload = reload
	n := serveTLSNode(t, cfg, listen(t))
	served := func() *x509.Certificate {
		t.Helper()
		c, err := tls.Dial("tcp", n.addr, &tls.Config{RootCAs: ca.Pool()})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0]
	}
	before := served()
	old, err := tls.Dial("tcp", n.addr, &tls.Config{RootCAs: ca.Pool()})
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()

	next := ca.Issue(t, "n1")
	writeFile(t, cfg.TLS.CertFile, next.CertPEM)
	writeFile(t, cfg.TLS.KeyFile, next.KeyPEM)
	if got := served(); !got.Equal(before) {
		t.Fatal("the new files were used before Reload")
	}
	if err := n.ReloadTLS(); err != nil {
		t.Fatal(err)
	}
	if got := served(); !got.Equal(next.Cert) {
		t.Fatalf("after Reload the server presents serial %v, want the new %v", got.SerialNumber, next.Cert.SerialNumber)
	}
	if got := old.ConnectionState().PeerCertificates[0]; !got.Equal(before) {
		t.Fatal("a connection made before the reload changed certificates")
	}

	// Config.TLSReload does the same (the server command feeds it SIGHUP).
	third := ca.Issue(t, "n1")
	writeFile(t, cfg.TLS.CertFile, third.CertPEM)
	writeFile(t, cfg.TLS.KeyFile, third.KeyPEM)
	reload <- struct{}{}
	eventually(t, "the reload asked for on TLSReload", func() bool { return served().Equal(third.Cert) })

	// A reload that fails keeps the certificate in use.
	writeFile(t, cfg.TLS.KeyFile, []byte("not a key"))
	if err := n.ReloadTLS(); err == nil {
		t.Fatal("Reload accepted a broken key")
	}
	if got := served(); !got.Equal(third.Cert) {
		t.Fatal("a failed reload changed the certificate presented")
	}
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestTLSConfigValidate(t *testing.T) {
	for name, c := range map[string]Config{
		"no key":               {TLS: tlsconfig.Files{CertFile: "c.pem"}},
		"raft without a CA":    {RaftAddr: "127.0.0.1:7471", TLS: tlsconfig.Files{CertFile: "c.pem", KeyFile: "k.pem"}},
		"require without a CA": {TLS: tlsconfig.Files{CertFile: "c.pem", KeyFile: "k.pem", RequireClientCert: true}},
	} {
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "TLS") {
			t.Errorf("%s: Validate: %v", name, err)
		}
	}
}

// A join over TLS: the leader probes the new node's client port over
// https and its raft port with a full handshake, then replicates to it.
func TestTLSJoin(t *testing.T) {
	ca := tlstest.NewCA(t, "cluster CA")
	var nodes []*tlsNode
	for i := range 2 {
		id := fmt.Sprintf("n%d", i+1)
		rln := listen(t)
		cfg := clusterConfig(id)
		cfg.RaftAddr, cfg.raftListener, cfg.Join = rln.Addr().String(), rln, i > 0
		cfg.TLS = nodeFiles(t, ca, id)
		nodes = append(nodes, serveTLSNode(t, cfg, listen(t)))
	}
	l := tlsLeader(t, nodes[:1])
	hc := httpsClient(ca.Pool())
	n2 := nodes[1]
	body := fmt.Sprintf(`{"id":"n2","raft_addr":%q,"client_addr":%q}`, n2.node.Addr(), n2.addr)
	eventually(t, "the join to be accepted", func() bool {
		st, m := postJSON(t, hc, "https://"+l.addr+api.PathJoin, body)
		if st != 200 && st != 503 {
			t.Fatalf("join: %d %v", st, m)
		}
		return st == 200
	})
	acquireOnLeader(t, nodes, hc, "k", "a", 60000)
	eventually(t, "the joined node to replicate", func() bool { return n2.fsm.LastToken() == 1 })

	// A node whose certificate is from another CA is refused: the probe
	// of its client port fails verification, nothing changes.
	rogueCA := tlstest.NewCA(t, "rogue CA")
	rln := listen(t)
	cfg := clusterConfig("n3")
	cfg.RaftAddr, cfg.raftListener, cfg.Join = rln.Addr().String(), rln, true
	cfg.TLS = nodeFiles(t, rogueCA, "n3")
	n3 := serveTLSNode(t, cfg, listen(t))
	body = fmt.Sprintf(`{"id":"n3","raft_addr":%q,"client_addr":%q}`, n3.node.Addr(), n3.addr)
	// A 2-node cluster on a loaded machine may change leaders meanwhile: a
	// 503 (not_leader, unavailable) is asked again of the leader then.
	eventually(t, "the rogue join to be answered", func() bool {
		l = tlsLeader(t, nodes)
		st, m := postJSON(t, hc, "https://"+l.addr+api.PathJoin, body)
		if st == 503 {
			return false
		}
		if st == 200 || m["code"] != api.CodeNodeUnreachable {
			t.Fatalf("join of a node with another CA's certificate: %d %v", st, m)
		}
		return true
	})
	if ms := l.fsm.Members(); len(ms) != 2 {
		t.Fatalf("members after the refused join: %v", ms)
	}
}
