package server

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/fencelock/fencelock/api"
)

// The HTTP adapter over the service: each handler decodes the request,
// calls the operation, and encodes its answer or maps its *Error to a
// status with api.Status. The framed protocol (internal/framing) serves
// this same handler, so it is an adapter over this one.

// Call is one request as the authorization seam sees it.
type Call struct {
	// Op names the operation: acquire, renew, extend, extend-batch,
	// release, check, lock, locks, overview, watch, health, ready, metrics,
	// members, join, remove, announce, identity, session-open,
	// session-extend, session-close, acquire-all.
	Op     string
	Method string
	Path   string
	// Remote is the caller's address as the transport knows it.
	Remote string
	// TLS is the caller's TLS state; nil on a plain connection (and on
	// framed connections, which have no TLS yet).
	TLS *tls.ConnectionState
	// Header holds the request's headers (a framed request has at most a
	// Content-Type).
	Header http.Header
}

// Authorizer decides whether a call may run (Config.Authorizer). The
// router asks it for every routed request, after the path and method are
// known and before the operation runs; a refusal is answered as its
// *Error if it is one, else as an internal error, and the operation does
// not run.
type Authorizer interface {
	Authorize(ctx context.Context, c Call) error
}

// AuthorizerFunc is a function as an Authorizer.
type AuthorizerFunc func(ctx context.Context, c Call) error

// Authorize calls f.
func (f AuthorizerFunc) Authorize(ctx context.Context, c Call) error { return f(ctx, c) }

// handlerFunc answers one route; a non-nil *Error is written by the router.
type handlerFunc func(w http.ResponseWriter, r *http.Request) *Error

type route struct {
	method string
	op     string
	handle handlerFunc
}

// router answers 404 for an unknown path and 405 (with Allow) for a known
// path and another method, both as JSON errors, and never lets a panic
// reach the connection as anything but a 500 JSON error.
type router struct {
	s      *Server
	routes map[string]route
}

func (s *Server) routes() http.Handler {
	metrics := promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{})
	post := http.MethodPost
	get := http.MethodGet
	routes := map[string]route{
		api.PathAcquire:     {post, "acquire", body(s.Acquire)},
		api.PathRenew:       {post, "renew", body(s.Renew)},
		api.PathExtend:      {post, "extend", body(s.Extend)},
		api.PathExtendBatch: {post, "extend-batch", body(s.ExtendBatch)},
		api.PathRelease:     {post, "release", body(s.Release)},
		api.PathCheck:       {get, "check", s.httpCheck},
		api.PathLock:        {get, "lock", s.httpGet},
		api.PathLocks:       {get, "locks", s.httpList},
		api.PathOverview:    {get, "overview", s.httpOverview},
		api.PathWatch:       {get, "watch", s.httpWatch}, // watch_http.go
		api.PathHealth: {get, "health", func(w http.ResponseWriter, r *http.Request) *Error {
			return reply(w, api.StatusResponse{Status: "ok"}, nil)
		}},
		api.PathReady: {get, "ready", func(w http.ResponseWriter, r *http.Request) *Error {
			return reply(w, api.StatusResponse{Status: "ready"}, s.CheckReady(r.Context()))
		}},
		api.PathMembers: {get, "members", func(w http.ResponseWriter, r *http.Request) *Error {
			m, err := s.Members(r.Context())
			return reply(w, m, err)
		}},
		api.PathJoin:     {post, "join", body(s.Join)},
		api.PathRemove:   {post, "remove", body(s.Remove)},
		api.PathAnnounce: {post, "announce", body(s.Announce)},
		api.PathIdentity: {get, "identity", func(w http.ResponseWriter, r *http.Request) *Error {
			return reply(w, s.Identity(r.Context()), nil)
		}},
		api.PathMetrics: {get, "metrics", func(w http.ResponseWriter, r *http.Request) *Error {
			metrics.ServeHTTP(w, r)
			return nil
		}},
	}
	s.sessionRoutes(routes) // http_session.go
	s.guardRoutes(routes)   // auth.go
	return &router{s: s, routes: routes}
}

// body adapts an operation that takes a JSON body.
func body[Req, Resp any](op func(context.Context, Req) (Resp, error)) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) *Error {
		var req Req
		if e := decodeBody(w, r, &req); e != nil {
			return e
		}
		resp, err := op(r.Context(), req)
		return reply(w, resp, err)
	}
}

// reply writes v, or hands err to the router.
func reply(w http.ResponseWriter, v any, err error) *Error {
	if err != nil {
		return asError(err)
	}
	writeJSON(w, http.StatusOK, v)
	return nil
}

func (s *Server) httpCheck(w http.ResponseWriter, r *http.Request) *Error {
	q := r.URL.Query()
	key := q.Get(api.QueryKey)
	if e := checkKey("key", key); e != nil {
		return e
	}
	raw := q.Get(api.QueryToken)
	if raw == "" {
		return invalid("token", "token is required")
	}
	token, err := strconv.ParseUint(raw, 10, 64)
	if err != nil {
		return invalid("token", "token must be an unsigned integer")
	}
	c, err := s.Check(r.Context(), key, token)
	return reply(w, c, err)
}

func (s *Server) httpGet(w http.ResponseWriter, r *http.Request) *Error {
	l, err := s.Get(r.Context(), r.URL.Query().Get(api.QueryKey))
	return reply(w, l, err)
}

func (s *Server) httpList(w http.ResponseWriter, r *http.Request) *Error {
	l, err := s.listPage(r)
	return reply(w, l, err)
}

// listPage is the page GET /v1/locks asks for (prefix, after, limit).
func (s *Server) listPage(r *http.Request) (api.ListResponse, error) {
	q := r.URL.Query()
	return s.ListAfter(r.Context(), q.Get(api.QueryPrefix), q.Get(api.QueryAfter), pageLimit(q))
}

// pageLimit is a page's limit query: 0 (the default) when absent, -1 when
// it is not a positive integer, which the service refuses after checking
// the prefix, so that a bad prefix is the error reported first.
func pageLimit(q url.Values) int {
	raw := q.Get(api.QueryLimit)
	if raw == "" {
		return 0
	}
	n, err := strconv.Atoi(raw)
	if err != nil || n < 1 {
		return -1
	}
	return n
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

func (rt *router) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if rt.serveDashboard(w, r) { // http_overview.go
		return
	}
	requestTLS(r) // tls.go
	sw := &statusWriter{ResponseWriter: w}
	name := r.URL.Path
	rte, ok := rt.routes[r.URL.Path]
	start := time.Now()
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				panic(p)
			}
			rt.s.log.Error("handler panic", "path", r.URL.Path, "panic", p, "stack", string(debug.Stack()))
			if sw.status == 0 {
				writeError(sw, &Error{Code: api.CodeInternal, Message: "internal error"})
			}
		}
		rt.s.metrics.requests.WithLabelValues(name, strconv.Itoa(sw.status)).Inc()
		rt.s.log.Debug("request", "method", r.Method, "path", r.URL.Path, "status", sw.status,
			"duration", time.Since(start), "remote", r.RemoteAddr)
	}()
	if !ok {
		name = "unknown"
		writeError(sw, newError(api.CodeNotFound, "no such route: %s", r.URL.Path))
		return
	}
	if r.Method != rte.method {
		sw.Header().Set("Allow", rte.method)
		writeError(sw, newError(api.CodeMethodNotAllowed, "%s is not allowed on %s; use %s", r.Method, r.URL.Path, rte.method))
		return
	}
	if a := rt.s.cfg.Authorizer; a != nil {
		c := Call{Op: rte.op, Method: r.Method, Path: r.URL.Path, Remote: r.RemoteAddr, TLS: r.TLS, Header: r.Header}
		if err := a.Authorize(r.Context(), c); err != nil {
			writeError(sw, asError(err))
			return
		}
	}
	ar, e := rt.s.authenticate(r, rte.op) // auth.go
	if e != nil {
		writeError(sw, e)
		return
	}
	if e := rte.handle(sw, ar); e != nil {
		writeError(sw, asError(rt.s.fail(e)))
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", api.ContentType)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, e *Error) {
	writeJSON(w, e.Status(), e)
}

// decodeBody reads one JSON object of at most api.MaxBodyBytes into v,
// refusing unknown fields and trailing data. Its errors name the field.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) *Error {
	r.Body = http.MaxBytesReader(w, r.Body, api.MaxBodyBytes)
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			return jsonError(err)
		}
		return invalid("body", "body must hold exactly one JSON object")
	}
	return nil
}

func jsonError(err error) *Error {
	var (
		mb     *http.MaxBytesError
		syntax *json.SyntaxError
		typ    *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &mb):
		return invalid("body", "body is larger than %d bytes", mb.Limit)
	case errors.Is(err, io.EOF):
		return invalid("body", "body is empty; a JSON object is required")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return invalid("body", "body is truncated JSON")
	case errors.As(err, &syntax):
		return invalid("body", "malformed JSON at byte %d: %v", syntax.Offset, err)
	case errors.As(err, &typ):
		if typ.Field == "" {
			return invalid("body", "body must be a JSON object, not %s", typ.Value)
		}
		return invalid(typ.Field, "%s must be %s, not %s", typ.Field, jsonKind(typ.Type.Kind().String()), typ.Value)
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		name = strings.Trim(name, `"`)
		return invalid(name, "unknown field %q", name)
	}
	return invalid("body", "bad JSON: %v", err)
}

func jsonKind(k string) string {
	switch {
	case strings.HasPrefix(k, "int"), strings.HasPrefix(k, "uint"):
		return "an integer in range"
	case k == "string":
		return "a string"
	case k == "slice":
		return "an array"
	}
	return "a " + k
}
