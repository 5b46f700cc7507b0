package tlsconfig_test

import (
	"crypto/tls"
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
