package raftport

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"

	"github.com/fencelock/fencelock/internal/tlsconfig"
)

// Config is what a raft port is opened and probed with. An engine takes
// it from its node.Config (node.Config.RaftPortConfig).
type Config struct {
	// Addr is the address the port listens on, unless Listener is set.
	Addr string
	// Listener, if set, is what the port accepts on instead of a
	// listener on Addr.
	Listener net.Listener
	// TLS, when set, runs the port over mutual TLS; nil: plain TCP,
	// which needs InsecureRaft.
	TLS PeerTLS
	// InsecureRaft allows a port without TLS.
	InsecureRaft bool
	// Insecure allows a port on a non-loopback address without TLS.
	Insecure bool
	// Limits are the port's budgets; zero fields take the defaults.
	Limits Limits
	// Dial replaces Probe's dial when set.
	Dial   func(ctx context.Context, addr string) error
	Logger *slog.Logger
}

// PeerTLS is what the raft port runs mutual TLS with: the configs of its
// listener and of its dialer, each taking only a node members accepts.
type PeerTLS interface {
	PeerServer(members tlsconfig.Members) *tls.Config
	PeerClient(addr string, members tlsconfig.Members) *tls.Config
}

// PeerProof is a credential its dialer proves in its first bytes, before
// the TLS handshake (clustersecret.Credential): the raft port reads and
// checks them first, so that the handshakes it spends its budget on are
// only those of holders of the credential.
type PeerProof interface {
	Proof() ([]byte, error)
	ProofLen() int
	CheckProof([]byte) bool
}
