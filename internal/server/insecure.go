package server

import (
	"fmt"
	"net"
)

// Safe defaults (issue 13, item 5): without TLS nobody on the network is
// authenticated, so the client port (Serve) and the raft port are bound
// to loopback addresses only unless Config.Insecure says otherwise.

// checkLoopback refuses to serve what on addr without TLS, unless it is a
// loopback address or Insecure is set.
func checkLoopback(cfg Config, what string, addr net.Addr) error {
	if cfg.TLS.Enabled() || cfg.Insecure {
		return nil
	}
	if ta, ok := addr.(*net.TCPAddr); ok && ta.IP.IsLoopback() {
		return nil
	}
	harm := "owns every lock"
	if what == "raft" {
		harm = "can forge the cluster's log"
	}
	return fmt.Errorf("server: refusing to serve the %s port on %s without TLS: anyone who reaches it %s; bind a loopback address, configure TLS, or pass --insecure", what, addr, harm)
}
