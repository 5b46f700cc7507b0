package httpapi

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/auth"
	"github.com/fencelock/fencelock/internal/framing"
	"github.com/fencelock/fencelock/internal/service"
)

// Call is one request as the authorization seam sees it.
type Call struct {
	// Op names the operation: the Op of its route.
	Op     string
	Method string
	Path   string
	// Remote is the caller's address as the transport knows it.
	Remote string
	// TLS is the caller's TLS state; nil on a plain connection.
	TLS *tls.ConnectionState
	// Header holds the request's headers (a framed request has at most a
	// Content-Type and an Authorization).
	Header http.Header
}

// Authorizer decides whether a call may run. The router asks it for
// every routed request, after the path and method are known and before
// the operation runs; a refusal is answered as its *service.Error if it
// is one, else as an internal error, and the operation does not run.
type Authorizer interface {
	Authorize(ctx context.Context, c Call) error
}

// AuthorizerFunc is a function as an Authorizer.
type AuthorizerFunc func(ctx context.Context, c Call) error

// Authorize calls f.
func (f AuthorizerFunc) Authorize(ctx context.Context, c Call) error { return f(ctx, c) }

// Config is what the transports are built over.
type Config struct {
	Service    *service.Service
	Guard      *auth.Guard
	Authorizer Authorizer   // nil: everything is authorized
	Metrics    http.Handler // GET /metrics
	// Gatherer is what Metrics serves; with it, a caller with a
	// principal is shown a series counted by key prefix only if it may
	// read the prefix (auth.RedactMetrics). nil: Metrics serves everyone alike.
	Gatherer prometheus.Gatherer
	Logger   *slog.Logger
	// StreamWriteTimeout drops an event stream whose peer takes no bytes
	// for this long; 0: 10 s.
	StreamWriteTimeout time.Duration
	// Hosts, if set, is the Host check of HTTP requests (browserCheck);
	// nil takes any Host.
	Hosts HostCheck
}

// API is the HTTP/JSON adapter and the binary calls of framed
// connections, both driven by one route table.
type API struct {
	cfg      Config
	svc      *service.Service
	guard    *auth.Guard
	log      *slog.Logger
	routes   []Route
	byPath   map[string]*Route
	requests *prometheus.CounterVec // route, code
	calls    *callHandler
}

// New builds the adapters over cfg.Service.
func New(cfg Config) *API {
	a := &API{cfg: cfg, svc: cfg.Service, guard: cfg.Guard, log: cfg.Logger,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencelock_http_requests_total", Help: "HTTP requests by route and status code.",
		}, []string{"route", "code"})}
	if a.cfg.StreamWriteTimeout <= 0 {
		a.cfg.StreamWriteTimeout = 10 * time.Second
	}
	a.routes = a.table()
	a.byPath = make(map[string]*Route, len(a.routes))
	for i := range a.routes {
		a.byPath[a.routes[i].Path] = &a.routes[i]
	}
	a.calls = newCallHandler(a)
	return a
}

// Routes is the route table.
func (a *API) Routes() []Route { return a.routes }

// Handler is the HTTP API.
func (a *API) Handler() http.Handler { return a }

// Collectors are the adapters' metrics.
func (a *API) Collectors() []prometheus.Collector { return []prometheus.Collector{a.requests} }

// route is the route of path: exact, or the first prefix route it is
// under.
func (a *API) route(path string) (*Route, bool) {
	if rt, ok := a.byPath[path]; ok && !rt.prefix {
		return rt, true
	}
	for i := range a.routes {
		if rt := &a.routes[i]; rt.prefix && rt.owns(path) {
			return rt, true
		}
	}
	return nil, false
}

// statusWriter remembers the status for the request counter.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the connection (flushes and
// write deadlines of event streams).
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// ServeHTTP answers 404 for an unknown path and 405 (with Allow) for a
// known path and another method, both as JSON errors, and never lets a
// panic reach the connection as anything but a 500 JSON error.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if a.cfg.Hosts != nil && r.Proto != framing.Proto && !a.cfg.Hosts(r.Host) {
		// Before the dashboard's assets too: a rebound page would
		// otherwise be served the dashboard, whose reads then pass.
		writeError(w, a.browserCheck(r))
		a.requests.WithLabelValues("refused_host", strconv.Itoa(api.Status(api.CodeHostNotAllowed))).Inc()
		return
	}
	rte, ok := a.route(r.URL.Path)
	if ok && rte.static != nil {
		// Public assets that hold no data: no authorizer, no count.
		rte.static.ServeHTTP(w, r)
		return
	}
	requestTLS(r)
	sw := &statusWriter{ResponseWriter: w}
	name := r.URL.Path
	start := time.Now()
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				panic(p)
			}
			a.log.Error("handler panic", "path", r.URL.Path, "panic", p, "stack", string(debug.Stack()))
			if sw.status == 0 {
				writeError(sw, &service.Error{Code: api.CodeInternal, Message: "internal error"})
			}
		}
		a.requests.WithLabelValues(name, strconv.Itoa(sw.status)).Inc()
		a.log.Debug("request", "method", r.Method, "path", r.URL.Path, "status", sw.status,
			"duration", time.Since(start), "remote", r.RemoteAddr)
	}()
	if !ok {
		name = "unknown"
		writeError(sw, service.NewError(api.CodeNotFound, "no such route: %s", r.URL.Path))
		return
	}
	if r.Method != rte.Method {
		sw.Header().Set("Allow", rte.Method)
		writeError(sw, service.NewError(api.CodeMethodNotAllowed, "%s is not allowed on %s; use %s", r.Method, r.URL.Path, rte.Method))
		return
	}
	if e := a.browserCheck(r); e != nil {
		writeError(sw, e)
		return
	}
	if az := a.cfg.Authorizer; az != nil {
		c := Call{Op: rte.Op, Method: r.Method, Path: r.URL.Path, Remote: r.RemoteAddr, TLS: r.TLS, Header: r.Header}
		if err := az.Authorize(r.Context(), c); err != nil {
			writeError(sw, service.AsError(err))
			return
		}
	}
	ctx, e := a.guard.Authenticate(r.Context(), r.Header.Get(api.HeaderAuthorization), r.TLS, rte.Need)
	if e != nil {
		writeError(sw, e)
		return
	}
	if e := rte.serve(sw, r.WithContext(ctx)); e != nil {
		writeError(sw, a.svc.Complete(e))
	}
}

type connTLSKey struct{}

// WithConnTLS is http.Server.ConnContext: the TLS state of a connection
// the framing listener wrapped, which net/http cannot see (a client
// certificate names a principal).
func WithConnTLS(ctx context.Context, c net.Conn) context.Context {
	if st := framing.TLSState(c); st != nil {
		return context.WithValue(ctx, connTLSKey{}, st)
	}
	return ctx
}

// requestTLS fills in r.TLS from the connection's context when net/http
// could not (see WithConnTLS).
func requestTLS(r *http.Request) {
	if r.TLS == nil {
		if st, ok := r.Context().Value(connTLSKey{}).(*tls.ConnectionState); ok {
			r.TLS = st
		}
	}
}

// Heavy reports whether path's answers grow with a page (framing.Server.Heavy).
func (a *API) Heavy(path string) bool {
	rt, ok := a.byPath[path]
	return ok && rt.Heavy
}
