package server

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// testCert makes a certificate signed by parent (self-signed when parent
// is nil) for the name given as CN, and as a DNS SAN when san is set.
func testCert(t *testing.T, cn string, san bool, parent *tls.Certificate) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	if san {
		tmpl.DNSNames = []string{cn}
	}
	signer, signKey := tmpl, any(key)
	if parent == nil {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
	} else {
		signer, signKey = parent.Leaf, parent.PrivateKey
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, &key.PublicKey, signKey)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(der)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
}

// A verified client certificate naming a principal authenticates as it;
// an unverified one (another CA) or one naming no principal does not.
func TestAuthClientCertificateNamesThePrincipal(t *testing.T) {
	s := startServer(t, fastConfig(""))
	admin := s.bootstrap()
	body := `{"name":"node1-policy","rules":[{"prefix":"nodes/","verbs":["lock","read"]}]}`
	if a := s.authDo("POST", "/v1/acl/policy/set", body, admin); a.status != 200 {
		t.Fatalf("policy set: %v", a.body)
	}
	if a := s.authDo("POST", "/v1/acl/token/create", `{"name":"node1","policies":["node1-policy"],"no_secret":true}`, admin); a.status != 200 || a.body["secret"] != nil {
		t.Fatalf("create without a secret: %d %v", a.status, a.body)
	}
	ca := testCert(t, "test-ca", false, nil)
	other := testCert(t, "other-ca", false, nil)
	pool := x509.NewCertPool()
	pool.AddCert(ca.Leaf)
	hs := httptest.NewUnstartedServer(s.Handler())
	hs.TLS = &tls.Config{Certificates: []tls.Certificate{testCert(t, "server", false, &ca)},
		ClientAuth: tls.VerifyClientCertIfGiven, ClientCAs: pool}
	hs.StartTLS()
	defer hs.Close()
	call := func(cert *tls.Certificate, path, body string) (int, map[string]any) {
		t.Helper()
		return callTLS(t, hs.URL, pool, cert, path, body)
	}
	byCN := testCert(t, "node1", false, &ca)
	bySAN := testCert(t, "node1", true, &ca)
	for _, c := range []*tls.Certificate{&byCN, &bySAN} {
		if st, m := call(c, "/v1/acl/whoami", ""); st != 200 || m["principal"] != "node1" {
			t.Fatalf("whoami with node1's certificate: %d %v", st, m)
		}
	}
	if st, m := call(&byCN, "/v1/acquire", acquireBody("nodes/a", "node1", 60000, "")); st != 200 {
		t.Fatalf("node1 acquire: %d %v", st, m)
	}
	if st, _ := call(&byCN, "/v1/acquire", acquireBody("other/a", "node1", 60000, "")); st != 403 {
		t.Fatalf("node1 acquire outside its policy: %d", st)
	}
	stranger := testCert(t, "stranger", true, &ca)
	if st, _ := call(&stranger, "/v1/acl/whoami", ""); st != 401 {
		t.Fatalf("a certificate naming no principal: %d", st)
	}
	if st, _ := call(nil, "/v1/acl/whoami", ""); st != 401 {
		t.Fatalf("no certificate: %d", st)
	}
	// A certificate the server asked for but did not verify (another CA)
	// names no one.
	loose := httptest.NewUnstartedServer(s.Handler())
	loose.TLS = &tls.Config{Certificates: hs.TLS.Certificates, ClientAuth: tls.RequestClientCert}
	loose.StartTLS()
	defer loose.Close()
	forged := testCert(t, "node1", true, &other)
	if st, m := callTLS(t, loose.URL, pool, &forged, "/v1/acl/whoami", ""); st != 401 {
		t.Fatalf("an unverified certificate naming node1: %d %v", st, m)
	}
}

func callTLS(t *testing.T, url string, pool *x509.CertPool, cert *tls.Certificate, path, body string) (int, map[string]any) {
	t.Helper()
	cfg := &tls.Config{RootCAs: pool}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}
	defer hc.CloseIdleConnections()
	method := http.MethodGet
	if body != "" {
		method = http.MethodPost
	}
	req, _ := http.NewRequest(method, url+path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json") // what every client sends with a body
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var m map[string]any
	_ = json.Unmarshal(raw, &m)
	return resp.StatusCode, m
}
