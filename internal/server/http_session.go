package server

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/acl"
)

// sessionRoutes adds the routes of sessions and multi-key acquire, with
// their ACL checks: a session's calls need the caller to own the holder
// (the state machine then refuses a session that is not that holder's);
// acquire-all needs lock on every key, as acquire does on one.
func (s *Server) sessionRoutes(m map[string]route) {
	post := http.MethodPost
	owns := func(c *caller, holder, what string) *Error {
		if !acl.OwnsHolder(c.p.Name, holder) {
			return denied("principal %q may %s only as holder %q or %q; not as %q", c.p.Name, what, c.p.Name, c.p.Name+"/...", holder)
		}
		return nil
	}
	none := func(api.SessionRequest) string { return "" }
	m[api.PathSessionOpen] = route{post, "session-open", body(guard(s.OpenSession,
		func(c *caller, r api.SessionOpenRequest) *Error { return owns(c, r.Holder, "open a session") },
		func(api.SessionOpenRequest) string { return "" }))}
	m[api.PathSessionExtend] = route{post, "session-extend", body(guard(s.ExtendSession,
		func(c *caller, r api.SessionRequest) *Error { return owns(c, r.Holder, "extend a session") }, none))}
	m[api.PathSessionClose] = route{post, "session-close", body(guard(s.CloseSession,
		func(c *caller, r api.SessionRequest) *Error { return owns(c, r.Holder, "close a session") }, none))}
	m[api.PathAcquireAll] = route{post, "acquire-all", body(guard(s.AcquireAll,
		func(c *caller, r api.AcquireAllRequest) *Error {
			for _, k := range r.Keys {
				if e := c.lockAs(k, r.Holder, "acquire"); e != nil {
					return e
				}
			}
			return nil
		},
		func(r api.AcquireAllRequest) string {
			if len(r.Keys) > 0 {
				return r.Keys[0]
			}
			return ""
		}))}
}

// sessionCollectors are the gauges of sessions: how many are open and
// how many locks they hold (the limits are per cluster, per holder and
// per session; docs/PRIMITIVES.md).
func (s *Server) sessionCollectors() []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "fencelock_sessions", Help: "Sessions not yet ended, in this node's replicated table.",
		}, func() float64 { n, _ := s.fsm.SessionStats(); return float64(n) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "fencelock_session_locks", Help: "Locks held under sessions, in this node's replicated table.",
		}, func() float64 { _, n := s.fsm.SessionStats(); return float64(n) }),
	}
}
