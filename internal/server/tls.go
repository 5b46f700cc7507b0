package server

import (
	"crypto/tls"
	"net"
	"time"
)

// TLS. With Config.TLS set, the client port serves TLS (the handshake
// comes first, then HTTP and framed connections are told apart as
// without TLS), the raft port runs mutual TLS (internal/node/raftport),
// and this node's own calls to other nodes (join probes, announcements)
// use https with its certificate (newPeers). ReloadTLS rereads the
// files: new handshakes use them.

// ReloadTLS rereads the certificate, key and CA files (on SIGHUP, say).
// On an error the certificates in use stay. Without TLS it does nothing.
func (s *Server) ReloadTLS() error {
	if s.tls == nil {
		return nil
	}
	if err := s.tls.Reload(); err != nil {
		return err
	}
	s.log.Info("TLS certificates reloaded", "cert", s.tls.Files().CertFile,
		"not_after", s.tls.Certificate().Leaf.NotAfter.UTC().Format(time.RFC3339))
	return nil
}

// reloadLoop reloads the TLS files on each value from reload.
func (s *Server) reloadLoop(reload <-chan struct{}) {
	defer s.wg.Done()
	for {
		select {
		case <-s.stop:
			return
		case <-reload:
			if s.tls == nil {
				s.log.Warn("asked to reload TLS certificates, but TLS is not configured")
				continue
			}
			if err := s.ReloadTLS(); err != nil {
				s.log.Error("reloading TLS certificates failed; the previous ones stay in use", "err", err)
			}
		}
	}
}

// wrapListener makes ln serve TLS when it is configured.
func (s *Server) wrapListener(ln net.Listener) net.Listener {
	if s.tls == nil {
		return ln
	}
	return tls.NewListener(ln, s.tls.ClientPort())
}
