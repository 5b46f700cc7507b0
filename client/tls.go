package client

import (
	"crypto/tls"
	"errors"

	"github.com/fencelock/fencelock/internal/tlsconfig"
)

// WithTLSConfig sets the TLS configuration for https:// addresses, which
// then carry both HTTP and framed connections over TLS; with it, an
// address given without a scheme (host:port) is https:// too. Set
// RootCAs to the cluster's CA, and Certificates (or GetClientCertificate)
// when the server asks for a client certificate. The config is cloned.
// A client given WithHTTPClient uses that client's own TLS settings for
// HTTP; this config still governs framed connections.
func WithTLSConfig(cfg *tls.Config) Option {
	return func(c *Client) {
		if cfg != nil {
			c.tls = cfg.Clone()
		}
	}
}

// WithTLSFiles is WithTLSConfig from PEM files: caFile holds the CA that
// signs the servers' certificates (empty: the system's roots), certFile
// and keyFile this client's certificate and key (both empty: none). New
// returns the error if a file cannot be read.
func WithTLSFiles(caFile, certFile, keyFile string) Option {
	return func(c *Client) {
		cfg, err := LoadTLSConfig(caFile, certFile, keyFile)
		if err != nil {
			c.optErr = errors.Join(c.optErr, err)
			return
		}
		c.tls = cfg
	}
}

// LoadTLSConfig is the config WithTLSFiles makes, for a caller that also
// needs it elsewhere (an http.Client of its own given WithHTTPClient).
// Its errors match ErrInvalid.
func LoadTLSConfig(caFile, certFile, keyFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pool, err := tlsconfig.LoadPool(caFile)
		if err != nil {
			return nil, invalidf("ca", "%v", err)
		}
		cfg.RootCAs = pool
	}
	switch {
	case certFile != "" && keyFile != "":
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, invalidf("cert", "loading the client certificate: %v", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	case certFile != "" || keyFile != "":
		return nil, invalidf("cert", "a client certificate needs both the certificate and the key file")
	}
	return cfg, nil
}

// defaultScheme is what an address without a scheme gets.
func (c *Client) defaultScheme() string {
	if c.tls != nil {
		return "https"
	}
	return "http"
}
