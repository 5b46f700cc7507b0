package server

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"net/http"
	"runtime/debug"
	"slices"
	"strconv"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/acl"
	"github.com/fencelock/fencelock/internal/callcodec"
	"github.com/fencelock/fencelock/internal/framing"
)

// The binary adapter over the service, for the hot calls of framed
// connections (internal/framing, MethodCall): acquire, extend, release and
// check, encoded by internal/callcodec. It runs what the HTTP route runs —
// the authorizer, authentication, the same guarded operation, the same
// error mapping and request counter — without an http.Request, a
// ResponseWriter or JSON, except for an error's answer, which is the
// API's JSON error as over HTTP.

// hotCalls are the operations both adapters run, guarded by the ACLs
// (guard): the HTTP routes decode JSON into them and the binary calls
// decode callcodec, so the two cannot check or answer differently.
type hotCalls struct {
	acquire func(context.Context, api.AcquireRequest) (api.Lease, error)
	extend  func(context.Context, api.ExtendRequest) (api.Lease, error)
	release func(context.Context, api.ReleaseRequest) (api.ReleaseResponse, error)
	check   func(context.Context, callcodec.CheckRequest) (api.CheckResponse, error)
}

func (s *Server) guardedCalls() hotCalls {
	return hotCalls{
		acquire: guard(s.Acquire,
			func(c *caller, r api.AcquireRequest) *Error { return c.lockAs(r.Key, r.Holder, "acquire") },
			func(r api.AcquireRequest) string { return r.Key }),
		extend: guard(s.Extend,
			func(c *caller, r api.ExtendRequest) *Error { return c.lockAs(r.Key, r.Holder, "extend") },
			func(r api.ExtendRequest) string { return r.Key }),
		release: s.guardedRelease,
		check:   s.guardedCheck,
	}
}

// guardedCheck is GET /v1/check as a typed call, checked in the order the
// HTTP route checks it: read on the key (readQuery), then the key.
func (s *Server) guardedCheck(ctx context.Context, q callcodec.CheckRequest) (api.CheckResponse, error) {
	if c := callerFrom(ctx); c != nil {
		if e := c.may(acl.Read, q.Key, "check"); e != nil {
			return api.CheckResponse{}, e
		}
	}
	if e := checkKey("key", q.Key); e != nil {
		return api.CheckResponse{}, e
	}
	return s.Check(ctx, q.Key, q.Token)
}

// callRoute is one binary call: its route's op and method (as the
// authorizer sees them) and how its body is served.
type callRoute struct {
	op, method string
	serve      func(ctx context.Context, body []byte) ([]byte, error)
}

// binaryCall adapts a typed operation to a binary call.
func binaryCall[Req, Resp any](decode func([]byte) (Req, error), op func(context.Context, Req) (Resp, error), encode func([]byte, Resp) []byte) func(context.Context, []byte) ([]byte, error) {
	return func(ctx context.Context, body []byte) ([]byte, error) {
		if len(body) > api.MaxBodyBytes {
			return nil, invalid("body", "body is larger than %d bytes", api.MaxBodyBytes)
		}
		req, err := decode(body)
		if err != nil {
			var ce *callcodec.Error
			if errors.As(err, &ce) {
				return nil, invalid(ce.Field, "%s", ce.Msg)
			}
			return nil, invalid("body", "%v", err)
		}
		resp, err := op(ctx, req)
		if err != nil {
			return nil, err
		}
		return encode(make([]byte, 0, 96), resp), nil
	}
}

func (s *Server) callRoutes() map[string]callRoute {
	hot := s.guardedCalls()
	return map[string]callRoute{
		api.PathAcquire: {"acquire", http.MethodPost, binaryCall(callcodec.Acquire, hot.acquire, callcodec.AppendLease)},
		api.PathExtend:  {"extend", http.MethodPost, binaryCall(callcodec.Extend, hot.extend, callcodec.AppendLease)},
		api.PathRelease: {"release", http.MethodPost, binaryCall(callcodec.Release, hot.release, callcodec.AppendReleased)},
		api.PathCheck:   {"check", http.MethodGet, binaryCall(callcodec.Check, hot.check, callcodec.AppendChecked)},
	}
}

// callHandler answers a server's binary calls (framing.CallHandler).
type callHandler struct {
	s      *Server
	routes map[string]callRoute
	paths  []string
}

// Calls is the framed connections' binary adapter: give it to
// framing.Server.Calls next to Handler.
func (s *Server) Calls() framing.CallHandler { return s.calls }

func (s *Server) newCallHandler() *callHandler {
	h := &callHandler{s: s, routes: s.callRoutes()}
	h.paths = slices.Sorted(maps.Keys(h.routes))
	return h
}

// CallPaths lists the calls answered in binary.
func (h *callHandler) CallPaths() []string { return h.paths }

// ServeCall answers one binary call as the router answers its route.
func (h *callHandler) ServeCall(ctx context.Context, from *framing.CallConn, path string, body []byte) (status int, answer []byte) {
	rte, ok := h.routes[path]
	if !ok {
		return errorAnswer(newError(api.CodeNotFound, "no binary call on %s", path))
	}
	start := time.Now()
	defer func() {
		if p := recover(); p != nil {
			h.s.log.Error("handler panic", "path", path, "panic", p, "stack", string(debug.Stack()))
			status, answer = errorAnswer(&Error{Code: api.CodeInternal, Message: "internal error"})
		}
		h.s.metrics.requests.WithLabelValues(path, strconv.Itoa(status)).Inc()
		if h.s.log.Enabled(ctx, slog.LevelDebug) {
			h.s.log.Debug("request", "method", framing.MethodCall, "path", path, "status", status,
				"duration", time.Since(start), "remote", from.Remote)
		}
	}()
	if a := h.s.cfg.Authorizer; a != nil {
		hdr := http.Header{}
		if from.Credential != "" {
			hdr.Set(api.HeaderAuthorization, from.Credential)
		}
		c := Call{Op: rte.op, Method: rte.method, Path: path, Remote: from.Remote, TLS: from.TLS, Header: hdr}
		if err := a.Authorize(ctx, c); err != nil {
			return errorAnswer(asError(err))
		}
	}
	actx, e := h.s.authenticateCall(ctx, from.Credential, from.TLS, rte.op)
	if e != nil {
		return errorAnswer(e)
	}
	if actx != nil {
		ctx = actx
	}
	out, err := rte.serve(ctx, body)
	if err != nil {
		return errorAnswer(asError(h.s.fail(asError(err))))
	}
	return http.StatusOK, out
}

// errorAnswer is e as the HTTP API writes it: its status and JSON.
func errorAnswer(e *Error) (int, []byte) {
	b, err := json.Marshal(e)
	if err != nil {
		return http.StatusInternalServerError, []byte(`{"error":"internal error","code":"internal"}` + "\n")
	}
	return e.Status(), append(b, '\n')
}
