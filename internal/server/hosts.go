package server

import (
	"net"
	"net/netip"
	"strings"

	"github.com/fencelock/fencelock/internal/httpapi"
	"github.com/fencelock/fencelock/internal/tlsconfig"
)

// hostCheck is the Host check of HTTP requests (httpapi.HostCheck): a
// page that rebinds its own name to this server's address (DNS
// rebinding) sends that name, so a Host must be one of the server's:
//
//   - an IP address (no page can rebind one), localhost or a name under
//     .localhost;
//   - the host of the advertised client address (Config.ClientAddr) and
//     every name of Config.AllowedHosts (the server command adds its
//     --listen host);
//   - with TLS, a DNS name of the node's certificate (as loaded now; a
//     *.example.com matches one label).
//
// An AllowedHosts entry "*" turns the check off (nil). An empty Host
// (HTTP/1.0) passes: browsers always send one.
func hostCheck(cfg Config, tls *tlsconfig.Reloader) httpapi.HostCheck {
	names := make(map[string]bool)
	add := func(h string) {
		if h = normalHost(h); h != "" {
			names[h] = true
		}
	}
	add(cfg.ClientAddr)
	for _, h := range cfg.AllowedHosts {
		if strings.TrimSpace(h) == "*" {
			return nil
		}
		add(h)
	}
	return func(host string) bool {
		h := normalHost(host)
		switch {
		case h == "", names[h], h == "localhost", strings.HasSuffix(h, ".localhost"):
			return true
		}
		if _, err := netip.ParseAddr(h); err == nil {
			return true
		}
		if tls != nil {
			if c := tls.Certificate(); c != nil && c.Leaf != nil {
				for _, n := range c.Leaf.DNSNames {
					if dnsMatch(strings.ToLower(n), h) {
						return true
					}
				}
			}
		}
		return false
	}
}

// normalHost is host (host, host:port or [v6]:port) without its port,
// brackets or final dot, in lower case.
func normalHost(host string) string {
	host = strings.TrimSpace(host)
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	return strings.ToLower(strings.TrimSuffix(host, "."))
}

// dnsMatch is a certificate name's match of host: equal, or a wildcard
// "*.rest" for one label followed by rest.
func dnsMatch(name, host string) bool {
	if rest, ok := strings.CutPrefix(name, "*."); ok {
		label, tail, found := strings.Cut(host, ".")
		return found && label != "" && tail == rest
	}
	return name == host
}
