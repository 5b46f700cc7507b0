package auth

import (
	"crypto/tls"
	"strings"
)

// Identified reports whether a connection that carries credential (an
// Authorization value, "" for none) and cs would be served as a
// principal, or needs none because this node knows ACLs are off. The
// framed transport holds a connection that is not identified to small
// frames and a short idle limit (internal/framing, Server.Authenticated).
func (g *Guard) Identified(credential string, cs *tls.ConnectionState) bool {
	st, known := g.tables.ACL()
	if !st.On {
		return known
	}
	if credential != "" {
		scheme, secret, _ := strings.Cut(credential, " ")
		if !strings.EqualFold(scheme, "Bearer") {
			return false
		}
		_, ok := st.ByToken(strings.TrimSpace(secret))
		return ok
	}
	_, ok := certPrincipal(st, cs)
	return ok
}
