package httpapi

import (
	"net"
	"strconv"

	"github.com/fencelock/fencelock/internal/dashboard"
)

// The web dashboard's assets are public (they hold no data): their route
// is served before the authorizer and the request counter; the read they
// poll, /v1/overview, is a route like the others.

var dashboardHandler = dashboard.Handler()

// DashboardURL is where a server listening on addr serves the dashboard,
// for the log line a new user reads first. An unspecified address (all
// interfaces) is shown as loopback, which reaches it from the same host.
func DashboardURL(addr net.Addr, tls bool) string {
	scheme := "http"
	if tls {
		scheme = "https"
	}
	host := addr.String()
	if ta, ok := addr.(*net.TCPAddr); ok && ta.IP.IsUnspecified() {
		host = net.JoinHostPort("127.0.0.1", strconv.Itoa(ta.Port))
	}
	return scheme + "://" + host + dashboard.Prefix
}
