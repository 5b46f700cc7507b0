package server

import (
	"net"
	"net/http"
	"strconv"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/acl"
	"github.com/fencelock/fencelock/internal/dashboard"
)

// The web dashboard and the read it polls. The dashboard's assets are
// public (they hold no data) and bypass the router; /v1/overview is a
// route like the others, authorized as a read on its prefix.

var dashboardHandler = dashboard.Handler()

// serveDashboard answers the dashboard's paths and reports whether it did.
func (rt *router) serveDashboard(w http.ResponseWriter, r *http.Request) bool {
	if !dashboard.Owns(r.URL.Path) {
		return false
	}
	dashboardHandler.ServeHTTP(w, r)
	return true
}

// dashboardURL is where a server listening on addr serves the dashboard,
// for the log line a new user reads first. An unspecified address (all
// interfaces) is shown as loopback, which reaches it from the same host.
func dashboardURL(addr net.Addr, tls bool) string {
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

// httpOverview answers GET /v1/overview?prefix=P&limit=N. With ACLs on it
// needs read on the prefix, and leaves out the leases (and their queues)
// below it that the caller may not read.
func (s *Server) httpOverview(w http.ResponseWriter, r *http.Request) *Error {
	q := r.URL.Query()
	prefix := q.Get(api.QueryPrefix)
	c := callerFrom(r.Context())
	if c != nil {
		if e := c.may(acl.Read, prefix, "read"); e != nil {
			return e
		}
	}
	o, err := s.Overview(r.Context(), prefix, pageLimit(q)) // a bad limit is refused after the prefix
	if err == nil && c != nil {
		o.Locks = readable(c, o.Locks, func(l api.LockOverview) string { return l.Key })
	}
	return reply(w, o, err)
}
