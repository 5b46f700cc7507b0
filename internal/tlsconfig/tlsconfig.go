// Package tlsconfig loads fencelock's certificates from PEM files and
// reloads them without a restart.
//
// One set of files serves a node: its certificate and key (presented to
// clients on the client port, to peers on the raft port, and to peers when
// it dials them, so it must allow both server and client authentication)
// and the CA that signs its peers' certificates (and, unless another is
// given, its clients'). The raft port takes only node certificates that
// list serverAuth and clientAuth and name a member of the configuration
// (CheckDialer; CheckNode when dialing): a client certificate, even from
// the peer CA, and one with no extended key usage are refused at the
// handshake. A Reloader holds what was last loaded; every
// tls.Config it makes reads the current files' contents at handshake time,
// so Reload changes what the next handshake presents and accepts, and
// connections already open are left alone.
package tlsconfig

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync/atomic"
)

// Files names the PEM files of one node's TLS setup.
type Files struct {
	// CertFile and KeyFile are this node's certificate (chain) and key.
	CertFile, KeyFile string
	// CAFile holds the CA certificates that sign peers' certificates.
	// Required for the raft transport; on the client port, clients'
	// certificates are verified against it unless ClientCAFile is set.
	CAFile string
	// ClientCAFile, if set, holds the CAs that sign clients'
	// certificates on the client port. Certificates from CAFile are
	// accepted there too: nodes call each other's client ports (joins,
	// announcements) with their own certificates.
	ClientCAFile string
	// RequireClientCert: the client port refuses a client that presents
	// no certificate signed by the client CA. Otherwise a certificate is
	// verified when given and a client may come without one.
	RequireClientCert bool
}

// Enabled reports whether any file is named.
func (f Files) Enabled() bool {
	return f.CertFile != "" || f.KeyFile != "" || f.CAFile != "" || f.ClientCAFile != ""
}

// Check reports what is missing from f.
func (f Files) Check() error {
	var errs []error
	if f.CertFile == "" || f.KeyFile == "" {
		errs = append(errs, errors.New("a certificate and its key are both needed"))
	}
	if f.RequireClientCert && f.CAFile == "" && f.ClientCAFile == "" {
		errs = append(errs, errors.New("requiring client certificates needs a CA to verify them with"))
	}
	return errors.Join(errs...)
}

// material is one load of the files.
type material struct {
	cert      *tls.Certificate
	peers     *x509.CertPool // nil without CAFile
	clients   *x509.CertPool // nil without either CA file
	requireCl bool
}

// Reloader holds the last successful load of its Files.
type Reloader struct {
	files Files
	cur   atomic.Pointer[material]
}

// Load reads f and returns a Reloader serving it.
func Load(f Files) (*Reloader, error) {
	if err := f.Check(); err != nil {
		return nil, fmt.Errorf("tls: %w", err)
	}
	r := &Reloader{files: f}
	if err := r.Reload(); err != nil {
		return nil, err
	}
	return r, nil
}

// Files returns the files r reads.
func (r *Reloader) Files() Files { return r.files }

// Reload reads the files again. On an error the previous certificates
// stay in use; on success every later handshake uses the new ones.
func (r *Reloader) Reload() error {
	f := r.files
	cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
	if err != nil {
		return fmt.Errorf("tls: loading %s and %s: %w", f.CertFile, f.KeyFile, err)
	}
	if cert.Leaf == nil && len(cert.Certificate) > 0 {
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return fmt.Errorf("tls: %s: %w", f.CertFile, err)
		}
	}
	m := &material{cert: &cert, requireCl: f.RequireClientCert}
	if f.CAFile != "" {
		if m.peers, err = LoadPool(f.CAFile); err != nil {
			return err
		}
		m.clients = m.peers
	}
	if f.ClientCAFile != "" {
		if m.clients, err = LoadPool(f.ClientCAFile, f.CAFile); err != nil {
			return err
		}
	}
	r.cur.Store(m)
	return nil
}

// Certificate returns the certificate now presented.
func (r *Reloader) Certificate() *tls.Certificate { return r.cur.Load().cert }

// LoadPool reads the PEM certificates in files (empty names skipped)
// into one pool.
func LoadPool(files ...string) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	for _, file := range files {
		if file == "" {
			continue
		}
		pem, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("tls: reading CA file: %w", err)
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls: %s holds no PEM certificate", file)
		}
	}
	return pool, nil
}

// ClientPort is the server's config for the client API port.
func (r *Reloader) ClientPort() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			m := r.cur.Load()
			c := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{*m.cert}}
			switch {
			case m.clients != nil && m.requireCl:
				c.ClientCAs, c.ClientAuth = m.clients, tls.RequireAndVerifyClientCert
			case m.clients != nil:
				c.ClientCAs, c.ClientAuth = m.clients, tls.VerifyClientCertIfGiven
			}
			return c, nil
		},
	}
}

// Members says whether id names a node this one may talk raft with: a
// member of its configuration, or the node an admin is joining.
type Members func(id string) bool

// NodeURIPrefix is how a certificate names its node as a URI SAN:
// fencelock://node/ID.
const NodeURIPrefix = "fencelock://node/"

// NodeNames are the node ids a certificate names: those of its
// fencelock://node/ID URI SANs when it has any (then nothing else
// counts), else its DNS SANs and its subject CN.
func NodeNames(c *x509.Certificate) []string {
	var names []string
	for _, u := range c.URIs {
		if s := u.String(); strings.HasPrefix(s, NodeURIPrefix) && len(s) > len(NodeURIPrefix) {
			names = append(names, strings.TrimPrefix(s, NodeURIPrefix))
		}
	}
	if len(names) > 0 {
		return names
	}
	names = append(names, c.DNSNames...)
	if c.Subject.CommonName != "" {
		names = append(names, c.Subject.CommonName)
	}
	return names
}

// CheckNode refuses the certificate of a raft peer this node dialed
// (already verified against the peer CA) unless it is a node's that
// names a node members accepts. A node's certificate lists serverAuth
// in its extended key usage, explicitly: one without the extension
// (which x509 reads as any use), one listing anyExtendedKeyUsage, and a
// client certificate (clientAuth only), whatever its name, are refused.
// members nil checks the usage only.
func CheckNode(c *x509.Certificate, members Members) error {
	if err := checkUsage(c, false); err != nil {
		return err
	}
	return checkMember(c, members)
}

// CheckDialer is CheckNode for the certificate of a peer that dialed this
// node's raft port: it must list clientAuth too.
func CheckDialer(c *x509.Certificate, members Members) error {
	if err := checkUsage(c, true); err != nil {
		return err
	}
	return checkMember(c, members)
}

// checkUsage wants serverAuth listed in c's extended key usage, and
// clientAuth too when dialer is set.
func checkUsage(c *x509.Certificate, dialer bool) error {
	if len(c.ExtKeyUsage) == 0 && len(c.UnknownExtKeyUsage) == 0 {
		return fmt.Errorf("tls: the raft peer %q presented a certificate with no extended key usage; a node's certificate lists serverAuth and clientAuth", c.Subject.CommonName)
	}
	if !slices.Contains(c.ExtKeyUsage, x509.ExtKeyUsageServerAuth) {
		if slices.Contains(c.ExtKeyUsage, x509.ExtKeyUsageClientAuth) {
			return fmt.Errorf("tls: the raft peer %q presented a client certificate (extended key usage without serverAuth); raft peers are nodes, whose certificates allow serverAuth and clientAuth", c.Subject.CommonName)
		}
		return fmt.Errorf("tls: the raft peer %q presented a certificate whose extended key usage does not list serverAuth; a node's certificate lists serverAuth and clientAuth", c.Subject.CommonName)
	}
	if dialer && !slices.Contains(c.ExtKeyUsage, x509.ExtKeyUsageClientAuth) {
		return fmt.Errorf("tls: the raft peer %q dialed with a certificate whose extended key usage does not list clientAuth; a node's certificate lists serverAuth and clientAuth", c.Subject.CommonName)
	}
	return nil
}

// checkMember wants c to name a node members accepts (members nil: any).
func checkMember(c *x509.Certificate, members Members) error {
	if members == nil {
		return nil
	}
	names := NodeNames(c)
	for _, n := range names {
		if members(n) {
			return nil
		}
	}
	return fmt.Errorf("tls: the raft peer's certificate names %q, no member of this node's configuration (a node must be joined by an admin before it talks raft)", names)
}

// verifyPeer is a VerifyConnection that runs check on the peer's
// certificate.
func verifyPeer(check func(*x509.Certificate, Members) error, members Members) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("tls: the raft peer presented no certificate")
		}
		return check(cs.PeerCertificates[0], members)
	}
}

// PeerServer is the raft port's config: a peer must present a
// certificate signed by the peer CA that is a node's and names a node
// members accepts (CheckDialer).
func (r *Reloader) PeerServer(members Members) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			m := r.cur.Load()
			if m.peers == nil {
				return nil, errors.New("tls: no peer CA loaded")
			}
			return &tls.Config{
				MinVersion:       tls.VersionTLS12,
				Certificates:     []tls.Certificate{*m.cert},
				ClientCAs:        m.peers,
				ClientAuth:       tls.RequireAndVerifyClientCert,
				VerifyConnection: verifyPeer(CheckDialer, members),
			}, nil
		},
	}
}

// PeerClient is the config for dialing a peer at addr (host:port): its
// certificate must be signed by the peer CA, name addr's host and be a
// node's (CheckNode), and this node presents its own certificate. With
// members set, the peer's certificate must also name a node members
// accepts.
func (r *Reloader) PeerClient(addr string, members Members) *tls.Config {
	m := r.cur.Load()
	return &tls.Config{
		MinVersion:       tls.VersionTLS12,
		ServerName:       hostOf(addr),
		RootCAs:          m.peers,
		Certificates:     []tls.Certificate{*m.cert},
		VerifyConnection: verifyPeer(CheckNode, members),
	}
}

// SameCA reports whether client certificates are verified against the
// peer CA: no ClientCAFile, or one with the same contents as CAFile. A
// client certificate from it then differs from a node's only by its
// name and usage.
func (f Files) SameCA() bool {
	if f.CAFile == "" {
		return false
	}
	if f.ClientCAFile == "" || f.ClientCAFile == f.CAFile {
		return true
	}
	a, errA := os.ReadFile(f.CAFile)
	b, errB := os.ReadFile(f.ClientCAFile)
	return errA == nil && errB == nil && bytes.Equal(bytes.TrimSpace(a), bytes.TrimSpace(b))
}

func hostOf(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}
