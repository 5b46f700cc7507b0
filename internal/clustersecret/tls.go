package clustersecret

import (
	"crypto/ed25519"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"net/url"
	"strings"
	"time"

	"github.com/fencelock/fencelock/internal/tlsconfig"
)

// caInfo is the HKDF info the authority's key is derived with: a new
// version of the derivation names another.
const caInfo = "fencelock raft CA v1"

// The validity of every certificate made here: fixed, so that nodes
// whose clocks disagree still agree. A certificate's life is not how
// access ends; changing the secret is.
var (
	notBefore = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	notAfter  = time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)
)

// authority is the certificate authority a secret derives: the same key
// and certificate on every node.
type authority struct {
	key  ed25519.PrivateKey
	cert *x509.Certificate
	fp   string // hex of the first 6 bytes of SHA-256 of the public key
}

func derive(s Secret) (*authority, error) {
	seed, err := hkdf.Key(sha256.New, s.b[:], nil, caInfo, ed25519.SeedSize)
	if err != nil {
		return nil, fmt.Errorf("clustersecret: deriving the authority: %w", err)
	}
	key := ed25519.NewKeyFromSeed(seed)
	pub := key.Public().(ed25519.PublicKey)
	sum := sha256.Sum256(pub)
	a := &authority{key: key, fp: hex.EncodeToString(sum[:6])}
	tmpl := a.template()
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, key)
	if err != nil {
		return nil, fmt.Errorf("clustersecret: the authority's certificate: %w", err)
	}
	if a.cert, err = x509.ParseCertificate(der); err != nil {
		return nil, fmt.Errorf("clustersecret: the authority's certificate: %w", err)
	}
	return a, nil
}

// template is the authority's certificate, to be signed by itself or,
// for a rotation, by the previous secret's authority.
func (a *authority) template() *x509.Certificate {
	return &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "fencelock raft CA " + a.fp},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLen:            1, // a node's certificate, under the authority signed by the previous one
		KeyUsage:              x509.KeyUsageCertSign,
	}
}

// Fingerprint names s without revealing it: 12 hex digits of its
// authority's public key, the same on every node that holds s. The raft
// port's log lines and errors name a secret by it.
func (s Secret) Fingerprint() string {
	seed, err := hkdf.Key(sha256.New, s.b[:], nil, caInfo, ed25519.SeedSize)
	if err != nil {
		return "?"
	}
	sum := sha256.Sum256(ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey))
	return hex.EncodeToString(sum[:6])
}

// Credential is what a node's raft port runs mutual TLS with: the
// authorities of its secrets and this node's own certificate.
type Credential struct {
	roots     *x509.CertPool
	cert      tls.Certificate
	fps       string   // the accepted secrets' fingerprints, for errors
	proofKeys [][]byte // the current secret's, then the previous one's
	seen      nonceMemory
}

// NewCredential derives the authority of current (and of previous, when
// not nil: accepted too, for a rotation) and mints nodeID's certificate
// under current's, with a fresh key.
func NewCredential(current Secret, previous *Secret, nodeID string) (*Credential, error) {
	if nodeID == "" {
		return nil, errors.New("clustersecret: a node certificate needs a node ID")
	}
	cur, err := derive(current)
	if err != nil {
		return nil, err
	}
	c := &Credential{roots: x509.NewCertPool(), fps: cur.fp}
	c.roots.AddCert(cur.cert)
	k, err := proofKey(current)
	if err != nil {
		return nil, err
	}
	c.proofKeys = append(c.proofKeys, k)
	chain := [][]byte{nil}
	if previous != nil && *previous != current {
		prev, err := derive(*previous)
		if err != nil {
			return nil, err
		}
		c.roots.AddCert(prev.cert)
		c.fps += " or " + prev.fp
		if k, err = proofKey(*previous); err != nil {
			return nil, err
		}
		c.proofKeys = append(c.proofKeys, k)
		// The current authority signed by the previous one: a node
		// that holds only the previous secret follows it from this
		// node's certificate to the authority it trusts.
		cross, err := x509.CreateCertificate(rand.Reader, cur.template(), prev.cert, cur.key.Public(), prev.key)
		if err != nil {
			return nil, fmt.Errorf("clustersecret: signing the authority with the previous secret's: %w", err)
		}
		chain = append(chain, cross)
	}
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("clustersecret: the node's key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("clustersecret: a serial number: %w", err)
	}
	leaf := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: nodeID},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	// The URI SAN names the node when it spells the ID back exactly;
	// otherwise the CN alone does (tlsconfig.NodeNames).
	if u, err := url.Parse(tlsconfig.NodeURIPrefix + nodeID); err == nil && strings.TrimPrefix(u.String(), tlsconfig.NodeURIPrefix) == nodeID {
		leaf.URIs = []*url.URL{u}
	}
	der, err := x509.CreateCertificate(rand.Reader, leaf, cur.cert, pub, cur.key)
	if err != nil {
		return nil, fmt.Errorf("clustersecret: the node's certificate: %w", err)
	}
	chain[0] = der
	parsed, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("clustersecret: the node's certificate: %w", err)
	}
	c.cert = tls.Certificate{Certificate: chain, PrivateKey: key, Leaf: parsed}
	return c, nil
}

// Certificate is this node's certificate and key, as presented to peers.
func (c *Credential) Certificate() tls.Certificate { return c.cert }

// PeerServer is the raft port's config: a peer must present a
// certificate of an accepted secret's authority, for clientAuth, that
// names a node members accepts.
func (c *Credential) PeerServer(members tlsconfig.Members) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{c.cert},
		// Verified by VerifyConnection, against the derived roots
		// only, with the usage a dialer needs.
		ClientAuth:       tls.RequireAnyClientCert,
		VerifyConnection: c.verify(x509.ExtKeyUsageClientAuth, members),
	}
}

// PeerClient is the config for dialing a peer: it must present a
// certificate of an accepted secret's authority, for serverAuth, that
// names a node members accepts (any node when members is nil). The
// address is not checked: a node's certificate names its node, not its address.
func (c *Credential) PeerClient(_ string, members tlsconfig.Members) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{c.cert},
		// Go would check the address against the certificate's
		// names; VerifyConnection checks the chain and the node
		// instead.
		InsecureSkipVerify: true,
		VerifyConnection:   c.verify(x509.ExtKeyUsageServerAuth, members),
	}
}

func (c *Credential) verify(usage x509.ExtKeyUsage, members tlsconfig.Members) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("clustersecret: the raft peer presented no certificate")
		}
		inter := x509.NewCertPool()
		for _, ic := range cs.PeerCertificates[1:] {
			inter.AddCert(ic)
		}
		leaf := cs.PeerCertificates[0]
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: c.roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
			return fmt.Errorf("clustersecret: the raft peer's certificate is not of this cluster's secret (%s): %w", c.fps, err)
		}
		return tlsconfig.CheckNode(leaf, members)
	}
}
