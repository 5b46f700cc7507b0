package httpapi

import (
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"net/http"
	"runtime/debug"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/framing"
	"github.com/fencelock/fencelock/internal/service"
)

// The binary adapter over the service, for the hot calls of framed
// connections (internal/framing, MethodCall): acquire, extend, release and
// check, encoded by internal/callcodec. It runs what the HTTP route runs —
// the authorizer, authentication, the same guarded operation, the same
// error mapping and request counter — without an http.Request, a
// ResponseWriter or JSON, except for an error's answer, which is the
// API's JSON error as over HTTP.

// callHandler answers a server's binary calls (framing.CallHandler).
type callHandler struct {
	a      *API
	routes map[string]*callRoute
	paths  []string
}

// callRoute is a route answered in binary, with its counter of calls
// answered 200 once there has been one: looking the series up by its
// labels was a hash and an allocation per call.
type callRoute struct {
	*Route
	ok atomic.Pointer[okCounter]
}

type okCounter struct{ prometheus.Counter }

// count counts a call answered status.
func (rt *callRoute) count(requests *prometheus.CounterVec, status int) {
	if status != http.StatusOK {
		requests.WithLabelValues(rt.Path, strconv.Itoa(status)).Inc()
		return
	}
	c := rt.ok.Load()
	if c == nil {
		c = &okCounter{requests.WithLabelValues(rt.Path, strconv.Itoa(status))}
		rt.ok.Store(c)
	}
	c.Inc()
}

// Calls is the framed connections' binary adapter: give it to
// framing.Server.Calls next to Handler.
func (a *API) Calls() framing.CallHandler { return a.calls }

func newCallHandler(a *API) *callHandler {
	h := &callHandler{a: a, routes: map[string]*callRoute{}}
	for i := range a.routes {
		if rt := &a.routes[i]; rt.call != nil {
			h.routes[rt.Path] = &callRoute{Route: rt}
		}
	}
	h.paths = slices.Sorted(maps.Keys(h.routes))
	return h
}

// CallPaths lists the calls answered in binary.
func (h *callHandler) CallPaths() []string { return h.paths }

// ServeCall answers one binary call as the router answers its route.
func (h *callHandler) ServeCall(ctx context.Context, from *framing.CallConn, path string, body []byte) (status int, answer []byte) {
	rte, ok := h.routes[path]
	if !ok {
		return errorAnswer(service.NewError(api.CodeNotFound, "no binary call on %s", path))
	}
	var start time.Time
	logged := h.a.log.Enabled(ctx, slog.LevelDebug)
	if logged {
		start = time.Now()
	}
	defer func() {
		if p := recover(); p != nil {
			h.a.log.Error("handler panic", "path", path, "panic", p, "stack", string(debug.Stack()))
			status, answer = errorAnswer(&service.Error{Code: api.CodeInternal, Message: "internal error"})
		}
		rte.count(h.a.requests, status)
		if logged {
			h.a.log.Debug("request", "method", framing.MethodCall, "path", path, "status", status,
				"duration", time.Since(start), "remote", from.Remote)
		}
	}()
	if az := h.a.cfg.Authorizer; az != nil {
		hdr := http.Header{}
		if from.Credential != "" {
			hdr.Set(api.HeaderAuthorization, from.Credential)
		}
		c := Call{Op: rte.Op, Method: rte.Method, Path: path, Remote: from.Remote, TLS: from.TLS, Header: hdr}
		if err := az.Authorize(ctx, c); err != nil {
			return errorAnswer(service.AsError(err))
		}
	}
	ctx, e := h.a.guard.Authenticate(ctx, from.Credential, from.TLS, rte.Need)
	if e != nil {
		return errorAnswer(e)
	}
	out, err := rte.call(ctx, body)
	if err != nil {
		return errorAnswer(h.a.svc.Complete(service.AsError(err)))
	}
	return http.StatusOK, out
}

// errorAnswer is e as the HTTP API writes it: its status and JSON.
func errorAnswer(e *service.Error) (int, []byte) {
	b, err := json.Marshal(e.Wire())
	if err != nil {
		return http.StatusInternalServerError, []byte(`{"error":"internal error","code":"internal"}` + "\n")
	}
	return e.Status(), append(b, '\n')
}
