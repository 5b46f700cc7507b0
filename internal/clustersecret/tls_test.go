package clustersecret

import (
	"crypto/tls"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/internal/tlsconfig"
	"github.com/fencelock/fencelock/internal/tlsconfig/tlstest"
)

func secret(t *testing.T) Secret {
	t.Helper()
	s, err := New()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func credential(t *testing.T, cur Secret, prev *Secret, id string) *Credential {
	t.Helper()
	c, err := NewCredential(cur, prev, id)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// handshake runs a TLS handshake between a dialer and a listener on
// loopback and returns each side's error.
func handshake(client, server *tls.Config) (clientErr, serverErr error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err, err
	}
	defer ln.Close()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return err, err
	}
	b, err := ln.Accept()
	if err != nil {
		return err, err
	}
	deadline := time.Now().Add(10 * time.Second)
	a.SetDeadline(deadline)
	b.SetDeadline(deadline)
	done := make(chan error, 1)
	go func() {
		s := tls.Server(b, server)
		err := s.Handshake()
		if err == nil {
			// TLS 1.3: the server has the client's certificate once
			// the handshake is done; a byte each way ends it for both.
			_, err = s.Write([]byte{1})
		}
		b.Close()
		done <- err
	}()
	c := tls.Client(a, client)
	err = c.Handshake()
	if err == nil {
		_, err = c.Read(make([]byte, 1))
	}
	a.Close()
	return err, <-done
}

func anyOf(ids ...string) tlsconfig.Members {
	return func(id string) bool {
		for _, x := range ids {
			if x == id {
				return true
			}
		}
		return false
	}
}

func TestSameSecretHandshakes(t *testing.T) {
	s := secret(t)
	a, b := credential(t, s, nil, "a"), credential(t, s, nil, "b")
	if ce, se := handshake(a.PeerClient("127.0.0.1:1", anyOf("b")), b.PeerServer(anyOf("a"))); ce != nil || se != nil {
		t.Fatalf("same secret: client %v, server %v", ce, se)
	}
	// Each side's member check applies: b takes no node named a.
	if _, se := handshake(a.PeerClient("", nil), b.PeerServer(anyOf("c"))); se == nil || !strings.Contains(se.Error(), "no member") {
		t.Fatalf("a dialer of no member: server %v", se)
	}
	// The dialer wants the node it dials: b is not c.
	if ce, _ := handshake(a.PeerClient("", anyOf("c")), b.PeerServer(nil)); ce == nil || !strings.Contains(ce.Error(), "no member") {
		t.Fatalf("the wrong node answering: client %v", ce)
	}
}

func TestAnotherSecretOrCAIsRefused(t *testing.T) {
	s := secret(t)
	node := credential(t, s, nil, "b")
	other := credential(t, secret(t), nil, "a")
	// A dialer that does not check the node, to see the node's refusal.
	blind := &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{other.Certificate()}}
	if _, se := handshake(blind, node.PeerServer(nil)); se == nil || !strings.Contains(se.Error(), "not of this cluster's secret") {
		t.Fatalf("a dialer with another secret: server %v", se)
	}
	if ce, _ := handshake(node.PeerClient("", nil), other.PeerServer(nil)); ce == nil {
		t.Fatal("a dialer took a node of another secret")
	}
	// No certificate at all, and a node certificate of some other CA
	// (even named like a member).
	if _, se := handshake(&tls.Config{InsecureSkipVerify: true}, node.PeerServer(nil)); se == nil {
		t.Fatal("a dialer without a certificate was taken")
	}
	ca := tlstest.NewCA(t, "ca")
	leaf := ca.IssueNode(t, "a").TLS(t)
	if _, se := handshake(&tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{leaf}}, node.PeerServer(anyOf("a"))); se == nil {
		t.Fatal("a dialer with another CA's node certificate was taken")
	}
	// TLS 1.2 is not spoken.
	if _, se := handshake(&tls.Config{InsecureSkipVerify: true, MaxVersion: tls.VersionTLS12, Certificates: []tls.Certificate{node.Certificate()}}, node.PeerServer(nil)); se == nil {
		t.Fatal("TLS 1.2 was taken")
	}
}

// A rotation: nodes on (new, previous) and nodes on the previous secret
// alone take each other, both ways; the new one alone and the previous
// one alone do not.
func TestRotationWindow(t *testing.T) {
	oldS, newS := secret(t), secret(t)
	both := credential(t, newS, &oldS, "a")
	onlyOld := credential(t, oldS, nil, "b")
	onlyNew := credential(t, newS, nil, "c")
	for _, p := range []struct {
		name         string
		dialer, node *Credential
		ok           bool
	}{
		{"both to old", both, onlyOld, true},
		{"old to both", onlyOld, both, true},
		{"both to new", both, onlyNew, true},
		{"new to both", onlyNew, both, true},
		{"old to new", onlyOld, onlyNew, false},
		{"new to old", onlyNew, onlyOld, false},
	} {
		ce, se := handshake(p.dialer.PeerClient("", nil), p.node.PeerServer(nil))
		if ok := ce == nil && se == nil; ok != p.ok {
			t.Errorf("%s: client %v, server %v; want ok %v", p.name, ce, se, p.ok)
		}
	}
	if c := credential(t, newS, &newS, "a"); len(c.Certificate().Certificate) != 1 {
		t.Error("the same secret given as previous made a cross certificate")
	}
}

// Every node derives the same authority: a certificate minted on one
// verifies on another built separately.
func TestDerivationIsStable(t *testing.T) {
	s := secret(t)
	a1, err := derive(s)
	if err != nil {
		t.Fatal(err)
	}
	a2, _ := derive(s)
	if !a1.cert.Equal(a2.cert) || a1.fp != s.Fingerprint() {
		t.Fatal("two derivations of one secret differ")
	}
}

// The proof before the handshake: taken from a holder of the secret
// (or, in a rotation, of either secret), once; refused from anybody
// else, and when replayed.
func TestProof(t *testing.T) {
	oldS, newS := secret(t), secret(t)
	node := credential(t, newS, &oldS, "a")
	for _, c := range []struct {
		name   string
		dialer *Credential
		ok     bool
	}{
		{"the same secrets", credential(t, newS, &oldS, "b"), true},
		{"the new secret alone", credential(t, newS, nil, "b"), true},
		{"the previous secret alone", credential(t, oldS, nil, "b"), true},
		{"another secret", credential(t, secret(t), nil, "b"), false},
	} {
		p, err := c.dialer.Proof()
		if err != nil || len(p) != ProofLen {
			t.Fatalf("%s: proof %x, %v", c.name, p, err)
		}
		if got := node.CheckProof(p); got != c.ok {
			t.Errorf("%s: CheckProof = %v, want %v", c.name, got, c.ok)
		}
		if c.ok && node.CheckProof(p) {
			t.Errorf("%s: a replayed proof was taken", c.name)
		}
	}
	p, _ := node.Proof()
	for i := range p {
		bad := append([]byte(nil), p...)
		bad[i] ^= 1
		if node.CheckProof(bad) && i < len(proofMagic)+proofNonce {
			t.Errorf("a proof with byte %d changed was taken", i)
		}
	}
	if node.CheckProof(p[:ProofLen-1]) || node.CheckProof(make([]byte, ProofLen)) {
		t.Error("a short or empty proof was taken")
	}
}
