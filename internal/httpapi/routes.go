package httpapi

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/acl"
	"github.com/fencelock/fencelock/internal/auth"
	"github.com/fencelock/fencelock/internal/callcodec"
	"github.com/fencelock/fencelock/internal/dashboard"
	"github.com/fencelock/fencelock/internal/service"
)

// Route is one entry of the route table: the one place a path is bound
// to its method, its operation, what its caller needs and how it is
// decoded and answered. The HTTP router, the binary calls of framed
// connections, the guard and the framing budgets all read it.
type Route struct {
	Method string
	Path   string
	// Op names the operation to the Authorizer and in audit lines.
	Op string
	// Need is what the caller needs once ACLs are on (auth.Open for
	// nothing); a route without one answers every call 500.
	Need auth.Need
	// Priority: the call keeps leases alive or gives them up; it has
	// a budget of its own on a framed connection (api.Priority).
	Priority bool
	// Heavy: the answer grows with a page (up to about 1.3 MiB); a framed
	// connection runs few at once.
	Heavy bool
	// Binary: also answered as a binary call (internal/callcodec).
	Binary bool

	prefix bool         // Path is a prefix (the dashboard's assets)
	static http.Handler // public assets: no authorizer, no count
	serve  func(w http.ResponseWriter, r *http.Request) *service.Error
	call   func(ctx context.Context, body []byte) ([]byte, error)
}

func (rt *Route) owns(path string) bool { return rt.prefix && dashboard.Owns(path) }

// table is the API, route by route.
func (a *API) table() []Route {
	s := a.svc
	key := func(k, holder string) auth.Subject { return auth.Subject{Keys: []string{k}, Holder: holder, Key: k} }
	target := func(t string) auth.Subject { return auth.Subject{Target: t} }
	return []Route{
		// Leases.
		post(a, api.PathAcquire, "acquire", auth.LockAs("acquire"),
			func(r api.AcquireRequest) auth.Subject { return key(r.Key, r.Holder) }, asPrincipal(s.Acquire),
			binary(callcodec.Acquire, callcodec.AppendLease)),
		post(a, api.PathRenew, "renew", auth.LockAs("renew"),
			func(r api.RenewRequest) auth.Subject { return key(r.Key, r.Holder) }, s.Renew, nil),
		post(a, api.PathExtend, "extend", auth.LockAs("extend"),
			func(r api.ExtendRequest) auth.Subject { return key(r.Key, r.Holder) }, s.Extend,
			binary(callcodec.Extend, callcodec.AppendLease)),
		post(a, api.PathExtendBatch, "extend-batch", auth.LockAs("extend"),
			func(r api.ExtendBatchRequest) auth.Subject {
				sub := auth.Subject{Holder: r.Holder}
				for _, it := range r.Leases {
					sub.Keys = append(sub.Keys, it.Key)
				}
				return sub
			}, s.ExtendBatch, nil),
		post(a, api.PathRelease, "release", auth.Release(),
			func(r api.ReleaseRequest) auth.Subject { return key(r.Key, r.Holder) }, s.Release,
			binary(callcodec.Release, callcodec.AppendReleased)),
		post(a, api.PathAcquireAll, "acquire-all", auth.LockAs("acquire"),
			func(r api.AcquireAllRequest) auth.Subject {
				sub := auth.Subject{Keys: r.Keys, Holder: r.Holder, Field: "keys"}
				if len(r.Keys) > 0 {
					sub.Key = r.Keys[0]
				}
				return sub
			}, asPrincipal(s.AcquireAll), nil),
		get(a, api.PathCheck, "check", auth.Read("check"), checkQuery,
			func(q callcodec.CheckRequest) auth.Subject { return auth.Subject{Keys: []string{q.Key}} },
			func(ctx context.Context, q callcodec.CheckRequest) (api.CheckResponse, error) {
				return s.Check(ctx, q.Key, q.Token)
			}, binary(callcodec.Check, callcodec.AppendChecked)),
		get(a, api.PathLock, "lock", auth.Read("read"),
			func(q url.Values) (string, *service.Error) { return q.Get(api.QueryKey), nil },
			func(k string) auth.Subject { return auth.Subject{Keys: []string{k}} }, s.Get, nil),
		filtered(get(a, api.PathLocks, "locks", auth.Read("list"), listQuery,
			func(q listPage) auth.Subject { return auth.Subject{Keys: []string{q.prefix}, Prefix: true} },
			func(ctx context.Context, q listPage) (api.ListResponse, error) {
				l, err := s.ListAfter(ctx, q.prefix, q.after, q.limit)
				if err == nil {
					l = auth.RedactList(ctx, l)
				}
				return l, err
			}, nil), func(rt *Route) { rt.Heavy = true }),
		get(a, api.PathOverview, "overview", auth.Read("read"), overviewQuery,
			func(q listPage) auth.Subject { return auth.Subject{Keys: []string{q.prefix}, Prefix: true} },
			func(ctx context.Context, q listPage) (api.Overview, error) {
				o, err := s.Overview(ctx, q.prefix, q.limit)
				if err == nil {
					o = auth.RedactOverview(ctx, o)
				}
				return o, err
			}, nil),
		{Method: http.MethodGet, Path: api.PathWatch, Op: "watch", Need: watchNeed, serve: a.serveWatch},

		// Sessions.
		post(a, api.PathSessionOpen, "session-open", auth.OwnHolder("open a session"),
			func(r api.SessionOpenRequest) auth.Subject { return auth.Subject{Holder: r.Holder} }, asPrincipal(s.OpenSession), nil),
		post(a, api.PathSessionExtend, "session-extend", auth.OwnHolder("extend a session"),
			func(r api.SessionRequest) auth.Subject { return auth.Subject{Holder: r.Holder} }, s.ExtendSession, nil),
		post(a, api.PathSessionClose, "session-close", auth.OwnHolder("close a session"),
			func(r api.SessionRequest) auth.Subject { return auth.Subject{Holder: r.Holder} }, s.CloseSession, nil),

		// The node and the cluster.
		get(a, api.PathHealth, "health", auth.Open(), noQuery, nil,
			func(context.Context, struct{}) (api.StatusResponse, error) {
				return api.StatusResponse{Status: "ok"}, nil
			}, nil),
		get(a, api.PathReady, "ready", auth.Open(), noQuery, nil,
			func(ctx context.Context, _ struct{}) (api.StatusResponse, error) {
				return api.StatusResponse{Status: "ready"}, s.CheckReady(ctx)
			}, nil),
		get(a, api.PathIdentity, "identity", auth.Open(), noQuery, nil,
			func(ctx context.Context, _ struct{}) (api.Identity, error) { return s.Identity(ctx), nil }, nil),
		get(a, api.PathMembers, "members", auth.AuthenticatedHere(), noQuery, nil,
			func(ctx context.Context, _ struct{}) (api.MembersResponse, error) { return s.Members(ctx) }, nil),
		{Method: http.MethodGet, Path: api.PathMetrics, Op: "metrics", Need: auth.Authenticated(), serve: a.serveMetrics},
		post(a, api.PathJoin, "join", auth.Admin("join"),
			func(r api.JoinRequest) auth.Subject { return target(r.ID) }, s.Join, nil),
		post(a, api.PathRemove, "remove", auth.Admin("remove"),
			func(r api.RemoveRequest) auth.Subject { return target(r.ID) }, s.Remove, nil),
		post(a, api.PathAnnounce, "announce", auth.Admin("announce"),
			func(r api.JoinRequest) auth.Subject { return target(r.ID) }, s.Announce, nil),

		// ACLs.
		post(a, api.PathACLBootstrap, "acl-bootstrap", auth.Bootstrap(),
			func(struct{}) auth.Subject { return target(acl.BootstrapPrincipal) },
			func(ctx context.Context, _ struct{}) (api.ACLSecret, error) { return s.ACLBootstrap(ctx) }, nil),
		get(a, api.PathACLRevision, "acl-revision", auth.Open(), noQuery, nil,
			func(ctx context.Context, _ struct{}) (api.ACLRevision, error) { return s.ACLRevision(ctx) }, nil),
		get(a, api.PathACLWhoAmI, "acl-whoami", auth.Authenticated(), noQuery, nil,
			func(ctx context.Context, _ struct{}) (api.WhoAmI, error) {
				st, _ := s.ACL()
				return api.WhoAmI{Auth: st.On, Principal: auth.Principal(ctx)}, nil
			}, nil),
		post(a, api.PathACLTokenCreate, "acl-token-create", auth.Admin("acl-token-create"),
			func(r api.ACLTokenRequest) auth.Subject { return target(r.Name) }, s.ACLCreateToken, nil),
		post(a, api.PathACLTokenDelete, "acl-token-delete", auth.Admin("acl-token-delete"),
			func(r api.ACLDeleteRequest) auth.Subject { return target(r.Name) }, s.ACLDeleteToken, nil),
		post(a, api.PathACLPolicySet, "acl-policy-set", auth.Admin("acl-policy-set"),
			func(r api.ACLPolicy) auth.Subject { return target(r.Name) }, s.ACLSetPolicy, nil),
		post(a, api.PathACLPolicyDelete, "acl-policy-delete", auth.Admin("acl-policy-delete"),
			func(r api.ACLDeleteRequest) auth.Subject { return target(r.Name) }, s.ACLDeletePolicy, nil),
		get(a, api.PathACLTokens, "acl-tokens", auth.AdminRead("read the ACLs"), noQuery, nil,
			func(ctx context.Context, _ struct{}) (api.ACLTokenList, error) { return s.ACLTokens(ctx) }, nil),
		get(a, api.PathACLPolicies, "acl-policies", auth.AdminRead("read the ACLs"), noQuery, nil,
			func(ctx context.Context, _ struct{}) (api.ACLPolicyList, error) { return s.ACLPolicies(ctx) }, nil),

		// The dashboard's assets hold no data.
		{Method: http.MethodGet, Path: dashboard.Prefix, Op: "dashboard", Need: auth.Open(), prefix: true, static: dashboardHandler},
	}
}

// endpoint is a typed operation behind its guard: the subject is read
// from the request, the caller checked, the operation run and its answer
// handed back through the guard, whichever transport decoded the request.
type endpoint[Req, Resp any] struct {
	a       *API
	op      string
	need    auth.Need
	subject func(Req) auth.Subject
	run     func(context.Context, Req) (Resp, error)
}

func (e endpoint[Req, Resp]) do(ctx context.Context, req Req) (Resp, error) {
	var sub auth.Subject
	if e.subject != nil && e.a.guard.NeedsSubject(ctx, e.need) {
		sub = e.subject(req)
	}
	if ae := e.a.guard.Check(ctx, e.need, e.op, sub); ae != nil {
		var none Resp
		return none, ae
	}
	resp, err := e.run(ctx, req)
	return resp, e.a.guard.Answer(ctx, e.need, e.op, sub, err)
}

// asPrincipal is an operation that counts quotas run as the principal
// the guard authenticated for the call ("" for none).
func asPrincipal[Req, Resp any](op func(context.Context, string, Req) (Resp, error)) func(context.Context, Req) (Resp, error) {
	return func(ctx context.Context, req Req) (Resp, error) { return op(ctx, auth.Principal(ctx), req) }
}

// codec is a binary call's encoding of a route's request and answer.
type codec[Req, Resp any] struct {
	decode func([]byte) (Req, error)
	encode func([]byte, Resp) []byte
}

func binary[Req, Resp any](decode func([]byte) (Req, error), encode func([]byte, Resp) []byte) *codec[Req, Resp] {
	return &codec[Req, Resp]{decode, encode}
}

// post is a route whose request is a JSON body.
func post[Req, Resp any](a *API, path, op string, need auth.Need, subject func(Req) auth.Subject,
	run func(context.Context, Req) (Resp, error), c *codec[Req, Resp]) Route {
	ep := endpoint[Req, Resp]{a, op, need, subject, run}
	rt := Route{Method: http.MethodPost, Path: path, Op: op, Need: need, Priority: api.Priority(path),
		serve: func(w http.ResponseWriter, r *http.Request) *service.Error {
			var req Req
			if e := decodeBody(w, r, &req); e != nil {
				return e
			}
			resp, err := ep.do(r.Context(), req)
			return reply(w, resp, err)
		}}
	return withCodec(rt, ep, c)
}

// get is a route whose request is its query.
func get[Req, Resp any](a *API, path, op string, need auth.Need, decode func(url.Values) (Req, *service.Error),
	subject func(Req) auth.Subject, run func(context.Context, Req) (Resp, error), c *codec[Req, Resp]) Route {
	ep := endpoint[Req, Resp]{a, op, need, subject, run}
	rt := Route{Method: http.MethodGet, Path: path, Op: op, Need: need, Priority: api.Priority(path),
		serve: func(w http.ResponseWriter, r *http.Request) *service.Error {
			req, e := decode(r.URL.Query())
			if e != nil {
				return e
			}
			resp, err := ep.do(r.Context(), req)
			return reply(w, resp, err)
		}}
	return withCodec(rt, ep, c)
}

func withCodec[Req, Resp any](rt Route, ep endpoint[Req, Resp], c *codec[Req, Resp]) Route {
	if c == nil {
		return rt
	}
	rt.Binary = true
	rt.call = func(ctx context.Context, body []byte) ([]byte, error) {
		if len(body) > api.MaxBodyBytes {
			return nil, service.Invalid("body", "body is larger than %d bytes", api.MaxBodyBytes)
		}
		req, err := c.decode(body)
		if err != nil {
			var ce *callcodec.Error
			if errors.As(err, &ce) {
				return nil, service.Invalid(ce.Field, "%s", ce.Msg)
			}
			return nil, service.Invalid("body", "%v", err)
		}
		resp, err := ep.do(ctx, req)
		if err != nil {
			return nil, err
		}
		return c.encode(make([]byte, 0, 96), resp), nil
	}
	return rt
}

func filtered(rt Route, f func(*Route)) Route {
	f(&rt)
	return rt
}

func noQuery(url.Values) (struct{}, *service.Error) { return struct{}{}, nil }

// checkQuery is GET /v1/check's key and token.
func checkQuery(q url.Values) (callcodec.CheckRequest, *service.Error) {
	req := callcodec.CheckRequest{Key: q.Get(api.QueryKey)}
	raw := q.Get(api.QueryToken)
	if raw == "" {
		return req, service.Invalid("token", "token is required")
	}
	token, err := strconv.ParseUint(raw, 10, 64)
	if err != nil {
		return req, service.Invalid("token", "token must be an unsigned integer")
	}
	req.Token = token
	return req, nil
}

// listPage is a page's query: prefix, after, limit.
type listPage struct {
	prefix, after string
	limit         int
}

func listQuery(q url.Values) (listPage, *service.Error) {
	return listPage{prefix: q.Get(api.QueryPrefix), after: q.Get(api.QueryAfter), limit: pageLimit(q)}, nil
}

func overviewQuery(q url.Values) (listPage, *service.Error) {
	return listPage{prefix: q.Get(api.QueryPrefix), limit: pageLimit(q)}, nil
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
