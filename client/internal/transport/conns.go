package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/fencelock/fencelock/internal/framing"
)

// DialTimeout bounds connecting to one server.
const DialTimeout = 2 * time.Second

// Config is how the connections are made: the client's options.
type Config struct {
	HTTP   *http.Client // nil: one made for a lock server (New)
	Framed bool         // carry requests to http(s):// addresses on framed connections
	TLS    *tls.Config  // for https:// addresses; nil: Go's defaults
	Token  string       // the bearer token every request carries; "": none
}

// Conns are the client's connections to every node: an HTTP client, and
// framed connections by host:port, plain and TLS. They are safe for
// concurrent use.
type Conns struct {
	cfg       Config
	frames    framing.Pool // by host:port of http:// addresses
	tlsFrames framing.Pool // by host:port of https:// addresses
}

// New returns the connections cfg describes; none is made before a
// request needs it.
func New(cfg Config) *Conns {
	t := &Conns{cfg: cfg, frames: framing.Pool{DialTimeout: DialTimeout}}
	t.tlsFrames = framing.Pool{DialTimeout: DialTimeout, Dial: t.tlsDial}
	if cfg.Token != "" {
		// Every framed connection sends the token once, first (an
		// HTTP request carries it in each Authorization header).
		t.frames.Auth = "Bearer " + cfg.Token
		t.tlsFrames.Auth = t.frames.Auth
	}
	if t.cfg.HTTP == nil {
		t.cfg.HTTP = &http.Client{Transport: &http.Transport{
			Proxy:               nil, // a lock server is never reached through a proxy by surprise
			DialContext:         (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			TLSHandshakeTimeout: 5 * time.Second,
			MaxIdleConnsPerHost: 16,
			IdleConnTimeout:     90 * time.Second,
			TLSClientConfig:     cfg.TLS,
		}}
	}
	return t
}

// Close drops idle HTTP connections and closes framed ones (calls still
// waiting on them fail). Later requests connect again.
func (t *Conns) Close() {
	t.cfg.HTTP.CloseIdleConnections()
	t.frames.Close()
	t.tlsFrames.Close()
}

// tlsDial makes the TLS connection a framed connection to an https://
// address starts on: the handshake is done within ctx.
func (t *Conns) tlsDial(ctx context.Context, addr string) (net.Conn, error) {
	cfg := t.cfg.TLS
	if cfg == nil {
		cfg = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: DialTimeout}, Config: cfg}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("TLS: %w", err)
	}
	return conn, nil
}

// SpeaksTLS reports whether the server at host (host:port) answers a TLS
// handshake, if only to refuse it, within ctx and DialTimeout. Only
// whether it speaks TLS is asked, not whom: nothing is sent.
func SpeaksTLS(ctx context.Context, host string) bool {
	pctx, cancel := context.WithTimeout(ctx, DialTimeout)
	defer cancel()
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: DialTimeout},
		Config: &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}}
	conn, err := d.DialContext(pctx, "tcp", host)
	var alert tls.AlertError
	switch {
	case err == nil:
		conn.Close()
	case errors.As(err, &alert):
		// It answered the handshake, if only to refuse it.
	default:
		return false
	}
	return true
}

// HasFramed reports whether a framed connection to addr (a base URL) is
// held, so that tests can tell frames from the HTTP fallback.
func (t *Conns) HasFramed(addr string) bool {
	if h, ok := strings.CutPrefix(addr, "https://"); ok {
		return t.tlsFrames.Has(h)
	}
	return t.frames.Has(strings.TrimPrefix(addr, "http://"))
}

// FramedConns is how many framed connections are held to addr (a plain
// http:// base URL), for tests.
func (t *Conns) FramedConns(addr string) int {
	return t.frames.Conns(strings.TrimPrefix(addr, "http://"))
}

// BinaryCalls reports whether the framed connection to addr (a plain
// http:// base URL) has learnt that its server takes path as a binary
// call, for tests.
func (t *Conns) BinaryCalls(addr, path string) bool {
	fc, err := t.frames.Get(context.Background(), strings.TrimPrefix(addr, "http://"))
	return err == nil && fc != nil && fc.Calls(path)
}
