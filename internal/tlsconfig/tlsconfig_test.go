package tlsconfig_test

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"strings"
	"testing"

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
		for _, c := range []*tls.Config{r.ClientPort(), r.PeerServer()} {
			cc, err := c.GetConfigForClient(&tls.ClientHelloInfo{})
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, &cc.Certificates[0])
		}
		out = append(out, &r.PeerClient("127.0.0.1:1").Certificates[0])
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
	cc, err := r.PeerServer().GetConfigForClient(&tls.ClientHelloInfo{})
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
	if err := handshake(t, r.PeerServer(), nodes.Pool(), clients.Issue(t, "bob").TLS(t)); err == nil {
		t.Error("the raft port accepted a client CA's certificate")
	}
	if err := handshake(t, r.PeerServer(), nodes.Pool(), nodes.Issue(t, "n2").TLS(t)); err != nil {
		t.Errorf("the raft port refused a node: %v", err)
	}
}
