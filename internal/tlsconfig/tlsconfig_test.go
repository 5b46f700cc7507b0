package tlsconfig_test

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/internal/tlsconfig"
	"github.com/fencelock/fencelock/internal/tlsconfig/tlstest"
)

func TestReloadSwapsWhatEveryConfigPresents(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	f := tlstest.Write(t, t.TempDir(), "n1", ca, ca.Issue(t, "n1"))
	r, err := tlsconfig.Load(tlsconfig.Files{CertFile: f.Cert, KeyFile: f.Key, CAFile: f.CA})
	if err != nil {
		t.Fatal(err)
	}
	presented := func() []*tls.Certificate {
		var out []*tls.Certificate
		for _, c := range []*tls.Config{r.ClientPort(), r.PeerServer(nil)} {
			cc, err := c.GetConfigForClient(&tls.ClientHelloInfo{})
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, &cc.Certificates[0])
		}
		out = append(out, &r.PeerClient("127.0.0.1:1", nil).Certificates[0])
		return out
	}
	first := r.Certificate()
	next := ca.Issue(t, "n1")
	if err := os.WriteFile(f.Cert, next.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f.Key, next.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range presented() {
		if !c.Leaf.Equal(first.Leaf) {
			t.Fatal("a config presented the new certificate before Reload")
		}
	}
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	for i, c := range presented() {
		if !c.Leaf.Equal(next.Cert) {
			t.Errorf("config %d still presents the old certificate after Reload", i)
		}
	}
}

func TestPeerServerRequiresAVerifiedClientCertificate(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	f := tlstest.Write(t, t.TempDir(), "n1", ca, ca.Issue(t, "n1"))
	r, err := tlsconfig.Load(tlsconfig.Files{CertFile: f.Cert, KeyFile: f.Key, CAFile: f.CA})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := r.PeerServer(nil).GetConfigForClient(&tls.ClientHelloInfo{})
	if err != nil {
		t.Fatal(err)
	}
	if cc.ClientAuth != tls.RequireAndVerifyClientCert || cc.ClientCAs == nil {
		t.Errorf("peer port: client auth %v, CAs %v", cc.ClientAuth, cc.ClientCAs)
	}
	cc, err = r.ClientPort().GetConfigForClient(&tls.ClientHelloInfo{})
	if err != nil {
		t.Fatal(err)
	}
	if cc.ClientAuth != tls.VerifyClientCertIfGiven {
		t.Errorf("client port without RequireClientCert: client auth %v", cc.ClientAuth)
	}
}

func TestLoadNamesWhatIsMissing(t *testing.T) {
	for name, f := range map[string]tlsconfig.Files{
		"no key":               {CertFile: "c.pem"},
		"require without a CA": {CertFile: "c.pem", KeyFile: "k.pem", RequireClientCert: true},
		"missing files":        {CertFile: "/nonexistent/c.pem", KeyFile: "/nonexistent/k.pem"},
	} {
		if _, err := tlsconfig.Load(f); err == nil || !strings.HasPrefix(err.Error(), "tls: ") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// handshake runs a TLS handshake between a server with cfg and a client
// presenting cert (if any) and trusting roots, and reports the client's
// view: the server writes one byte once it has accepted the client, so a
// refusal the server sends after the client's side is done is seen too.
func handshake(t *testing.T, cfg *tls.Config, roots *x509.CertPool, cert ...tls.Certificate) error {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	srv := tls.Server(a, cfg)
	go func() {
		if srv.Handshake() == nil {
			srv.Write([]byte{1})
		}
		srv.Close()
	}()
	cl := tls.Client(b, &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", Certificates: cert})
	if err := cl.Handshake(); err != nil {
		return err
	}
	_, err := cl.Read(make([]byte, 1))
	return err
}

// With a separate client CA, the client port takes its certificates and
// the nodes' (nodes call each other's client ports), and no others.
func TestClientPortTakesTheClientCAAndTheNodesCA(t *testing.T) {
	dir := t.TempDir()
	nodes := tlstest.NewCA(t, "nodes")
	clients := tlstest.NewCA(t, "clients")
	f := tlstest.Write(t, dir, "n1", nodes, nodes.Issue(t, "n1"))
	cf := tlstest.Write(t, dir, "alice", clients, clients.Issue(t, "alice"))
	r, err := tlsconfig.Load(tlsconfig.Files{CertFile: f.Cert, KeyFile: f.Key, CAFile: f.CA, ClientCAFile: cf.CA, RequireClientCert: true})
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		cert []tls.Certificate
		ok   bool
	}{
		"a client's certificate": {[]tls.Certificate{clients.Issue(t, "bob").TLS(t)}, true},
		"a node's certificate":   {[]tls.Certificate{nodes.Issue(t, "n2").TLS(t)}, true},
		"another CA's":           {[]tls.Certificate{tlstest.NewCA(t, "rogue").Issue(t, "eve").TLS(t)}, false},
		"none":                   {nil, false},
	} {
		err := handshake(t, r.ClientPort(), nodes.Pool(), c.cert...)
		if (err == nil) != c.ok {
			t.Errorf("%s: handshake error %v, want accepted %v", name, err, c.ok)
		}
	}
	// The raft port takes the nodes' CA only.
	if err := handshake(t, r.PeerServer(nil), nodes.Pool(), clients.Issue(t, "bob").TLS(t)); err == nil {
		t.Error("the raft port accepted a client CA's certificate")
	}
	if err := handshake(t, r.PeerServer(nil), nodes.Pool(), nodes.Issue(t, "n2").TLS(t)); err != nil {
		t.Errorf("the raft port refused a node: %v", err)
	}
}

func members(ids ...string) tlsconfig.Members {
	return func(id string) bool { return slices.Contains(ids, id) }
}

// The raft port takes a node of the configuration, and nothing else the
// peer CA signed: not a client certificate (whatever its name), not a
// node certificate naming no member.
func TestPeerServerTakesOnlyMembersNodeCertificates(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	f := tlstest.Write(t, t.TempDir(), "n1", ca, ca.IssueNode(t, "n1"))
	r, err := tlsconfig.Load(tlsconfig.Files{CertFile: f.Cert, KeyFile: f.Key, CAFile: f.CA})
	if err != nil {
		t.Fatal(err)
	}
	uri := func(cn, id string) *tlstest.Leaf {
		return ca.IssueTemplate(t, &x509.Certificate{
			Subject:     pkix.Name{CommonName: cn},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
			URIs:        []*url.URL{{Scheme: "fencelock", Host: "node", Path: "/" + id}},
		})
	}
	for name, c := range map[string]struct {
		leaf *tlstest.Leaf
		ok   bool
		err  string
	}{
		"a member's node certificate (CN)":         {ca.Issue(t, "n2"), true, ""},
		"a member's node certificate (URI SAN)":    {uri("whatever", "n2"), true, ""},
		"a client certificate":                     {ca.IssueClient(t, "alice"), false, "client certificate"},
		"a client certificate named like a member": {ca.IssueClient(t, "n2"), false, "client certificate"},
		"a node certificate of no member":          {ca.Issue(t, "n9"), false, "no member"},
		"a URI SAN of no member, a member's CN":    {uri("n2", "n9"), false, "no member"},
		"another CA's member certificate":          {tlstest.NewCA(t, "rogue").Issue(t, "n2"), false, ""},
	} {
		err := handshake(t, r.PeerServer(members("n1", "n2", "n3")), ca.Pool(), c.leaf.TLS(t))
		if (err == nil) != c.ok {
			t.Errorf("%s: handshake error %v, want accepted %v", name, err, c.ok)
		}
		if c.err != "" {
			if err := tlsconfig.CheckNode(c.leaf.Cert, members("n1", "n2", "n3")); err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: CheckNode %v, want an error saying %q", name, err, c.err)
			}
		}
	}
}

// Dialing a peer checks the other way: the node answering must be a
// member (or the node being joined).
func TestPeerClientChecksTheNodeItReached(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	dir := t.TempDir()
	f := tlstest.Write(t, dir, "n1", ca, ca.Issue(t, "n1"))
	r, err := tlsconfig.Load(tlsconfig.Files{CertFile: f.Cert, KeyFile: f.Key, CAFile: f.CA})
	if err != nil {
		t.Fatal(err)
	}
	g := tlstest.Write(t, dir, "n9", ca, ca.Issue(t, "n9"))
	peer, err := tlsconfig.Load(tlsconfig.Files{CertFile: g.Cert, KeyFile: g.Key, CAFile: g.CA})
	if err != nil {
		t.Fatal(err)
	}
	// A TCP connection, not net.Pipe: a client that refuses mid-flight
	// writes its alert while the server still writes, which an
	// unbuffered pipe deadlocks on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			srv := tls.Server(c, peer.PeerServer(nil))
			srv.SetDeadline(time.Now().Add(10 * time.Second))
			srv.Handshake()
			srv.Close()
		}
	}()
	dial := func(m tlsconfig.Members) error {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		return tls.Client(c, r.PeerClient("127.0.0.1:1", m)).Handshake()
	}
	if err := dial(members("n2")); err == nil || !strings.Contains(err.Error(), "no member") {
		t.Errorf("dialing n9 expecting n2: %v, want refused", err)
	}
	if err := dial(members("n9")); err != nil {
		t.Errorf("dialing n9 expecting n9: %v", err)
	}
}

func TestNodeNames(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	if got := tlsconfig.NodeNames(ca.Issue(t, "n1").Cert); !slices.Equal(got, []string{"localhost", "n1"}) {
		t.Errorf("CN n1: %q", got)
	}
	if got := tlsconfig.NodeNames(ca.IssueNode(t, "n1").Cert); !slices.Equal(got, []string{"n1"}) {
		t.Errorf("URI SAN n1: %q", got)
	}
}

func TestSameCA(t *testing.T) {
	dir := t.TempDir()
	nodes := tlstest.Write(t, dir, "n1", tlstest.NewCA(t, "nodes"), tlstest.NewCA(t, "x").Issue(t, "n1"))
	clients := tlstest.Write(t, dir, "alice", tlstest.NewCA(t, "clients"), tlstest.NewCA(t, "y").Issue(t, "alice"))
	copyCA := dir + "/copy-ca.pem"
	b, err := os.ReadFile(nodes.CA)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(copyCA, b, 0o600); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		f    tlsconfig.Files
		same bool
	}{
		"no client CA":           {tlsconfig.Files{CAFile: nodes.CA}, true},
		"the same file":          {tlsconfig.Files{CAFile: nodes.CA, ClientCAFile: nodes.CA}, true},
		"a copy of it":           {tlsconfig.Files{CAFile: nodes.CA, ClientCAFile: copyCA}, true},
		"a client CA of its own": {tlsconfig.Files{CAFile: nodes.CA, ClientCAFile: clients.CA}, false},
		"no peer CA":             {tlsconfig.Files{ClientCAFile: clients.CA}, false},
	} {
		if got := c.f.SameCA(); got != c.same {
			t.Errorf("%s: SameCA %v, want %v", name, got, c.same)
		}
	}
}

// usageLeaf is a certificate of ca naming the node id (CN, URI SAN) and
// 127.0.0.1, with exactly the extended key usages given (none: the
// extension is left out).
func usageLeaf(t *testing.T, ca *tlstest.CA, id string, usages ...x509.ExtKeyUsage) *tlstest.Leaf {
	return ca.IssueTemplate(t, &x509.Certificate{
		Subject:     pkix.Name{CommonName: id},
		ExtKeyUsage: usages,
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		URIs:        []*url.URL{{Scheme: "fencelock", Host: "node", Path: "/" + id}},
	})
}

// A raft peer's certificate must say what it is for (issue 41, item 4):
// the dialer's must list clientAuth and serverAuth (a node's: it serves
// too, and it is not a client certificate), the accepting node's must
// list serverAuth. A certificate of the nodes' CA without the extension
// (which x509 reads as "any use") is refused on both sides, and so is
// one listing anyExtendedKeyUsage.
func TestPeerCertificatesNeedTheirUsagesExplicitly(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	dir := t.TempDir()
	f := tlstest.Write(t, dir, "n1", ca, ca.IssueNode(t, "n1"))
	r, err := tlsconfig.Load(tlsconfig.Files{CertFile: f.Cert, KeyFile: f.Key, CAFile: f.CA})
	if err != nil {
		t.Fatal(err)
	}
	server, client := x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth
	cases := []struct {
		name           string
		usages         []x509.ExtKeyUsage
		dialer, server bool // accepted as the dialing peer, as the accepting one
		err            string
	}{
		{"no extended key usage", nil, false, false, "no extended key usage"},
		{"anyExtendedKeyUsage", []x509.ExtKeyUsage{x509.ExtKeyUsageAny}, false, false, "serverAuth"},
		{"clientAuth only", []x509.ExtKeyUsage{client}, false, false, "client certificate"},
		{"serverAuth only", []x509.ExtKeyUsage{server}, false, true, "clientAuth"},
		{"serverAuth and clientAuth", []x509.ExtKeyUsage{server, client}, true, true, ""},
	}
	for _, c := range cases {
		leaf := usageLeaf(t, ca, "n2", c.usages...)
		err := handshake(t, r.PeerServer(members("n1", "n2")), ca.Pool(), leaf.TLS(t))
		if (err == nil) != c.dialer {
			t.Errorf("%s, dialing the raft port: handshake error %v, want accepted %v", c.name, err, c.dialer)
		}
		if err := tlsconfig.CheckDialer(leaf.Cert, members("n1", "n2")); (err == nil) != c.dialer || c.err != "" && !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s: CheckDialer %v, want accepted %v or an error saying %q", c.name, err, c.dialer, c.err)
		}
		for _, m := range []tlsconfig.Members{members("n2"), nil} {
			if err := dialPeer(t, r, leaf, m); (err == nil) != c.server {
				t.Errorf("%s, answering a dial (members set %v): handshake error %v, want accepted %v", c.name, m != nil, err, c.server)
			}
		}
	}
}

// dialPeer dials, with r.PeerClient, a TLS server presenting leaf.
func dialPeer(t *testing.T, r *tlsconfig.Reloader, leaf *tlstest.Leaf, m tlsconfig.Members) error {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cfg := &tls.Config{Certificates: []tls.Certificate{leaf.TLS(t)}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		srv := tls.Server(c, cfg)
		srv.SetDeadline(time.Now().Add(10 * time.Second))
		srv.Handshake()
		srv.Close()
	}()
	defer func() { <-done }()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return tls.Client(c, r.PeerClient("127.0.0.1:1", m)).Handshake()
}
