package server

import (
	"context"
	"crypto/tls"
	"errors"
	"net/http"
	"strings"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/acl"
	"github.com/fencelock/fencelock/internal/fsm"
)

// Authentication and ACLs (docs/SECURITY.md, "Authentication and ACLs").
// The tables are replicated state (fsm.ACL); they are off until the
// cluster is bootstrapped (ACLBootstrap), and from then on the router
// authenticates every routed call to a principal (authenticate) and the
// HTTP routes check it against the tables before the operation runs
// (guardRoutes). The operations themselves (Server.Acquire, ...) are not
// checked: a program that calls them in-process is trusted; the
// principal is a transport's business.

// caller is the principal a routed request acts as, and the tables it
// was authenticated against.
type caller struct {
	st *acl.State
	p  acl.Principal
}

type callerKey struct{}

// callerFrom is ctx's caller; nil when ACLs are off or the call did not
// come through the router.
func callerFrom(ctx context.Context) *caller {
	c, _ := ctx.Value(callerKey{}).(*caller)
	return c
}

// openOps need no credential: liveness and readiness probes, the identity
// a leader asks of a node before adding it (names and ids, no secrets),
// and bootstrap, which refuses itself once done.
var openOps = map[string]bool{"health": true, "ready": true, "identity": true, "acl-bootstrap": true}

func unauthenticated(format string, args ...any) *Error {
	return newError(api.CodeUnauthenticated, format, args...)
}

func denied(format string, args ...any) *Error {
	return newError(api.CodePermissionDenied, "permission denied: "+format, args...)
}

// authenticate finds the principal of r when ACLs are on: a bearer token,
// else a verified client certificate whose SAN (DNS, email) or CN names a
// principal. A call with neither is refused 401, unless its op is open.
func (s *Server) authenticate(r *http.Request, op string) (*http.Request, *Error) {
	ctx, e := s.authenticateCall(r.Context(), r.Header.Get(api.HeaderAuthorization), r.TLS, op)
	if e != nil {
		return nil, e
	}
	if ctx == nil {
		return r, nil
	}
	return r.WithContext(ctx), nil
}

// authenticateCall is authenticate for a call whose credential (the
// Authorization header's value) and TLS state are known: the context to
// run it with, or nil when it runs as it came (ACLs off, or an open op
// without a principal).
func (s *Server) authenticateCall(ctx context.Context, credential string, cs *tls.ConnectionState, op string) (context.Context, *Error) {
	st := s.fsm.ACL()
	if !st.On {
		if openOps[op] || s.aclKnown() {
			return nil, nil
		}
		return nil, newError(api.CodeUnavailable, "this node has not yet applied the log it had when it started, so it cannot tell whether ACLs are on; retry, or ask another node")
	}
	var (
		p  acl.Principal
		ok bool
	)
	if credential != "" {
		scheme, secret, _ := strings.Cut(credential, " ")
		if !strings.EqualFold(scheme, "Bearer") {
			return nil, unauthenticated("the Authorization header must be \"Bearer <secret>\"")
		}
		if p, ok = st.ByToken(strings.TrimSpace(secret)); !ok {
			return nil, unauthenticated("unknown or deleted token")
		}
	} else if p, ok = certPrincipal(st, cs); !ok {
		if openOps[op] {
			return nil, nil
		}
		return nil, unauthenticated("authentication required: send Authorization: Bearer <secret> (fencelock --auth-token, FENCELOCK_AUTH_TOKEN)")
	}
	return context.WithValue(ctx, callerKey{}, &caller{st: st, p: p}), nil
}

// certPrincipal is the principal a verified client certificate names.
func certPrincipal(st *acl.State, cs *tls.ConnectionState) (acl.Principal, bool) {
	if cs == nil || len(cs.VerifiedChains) == 0 || len(cs.PeerCertificates) == 0 {
		return acl.Principal{}, false
	}
	leaf := cs.PeerCertificates[0]
	names := append(append([]string{}, leaf.DNSNames...), leaf.EmailAddresses...)
	names = append(names, leaf.Subject.CommonName)
	for _, n := range names {
		if p, ok := st.Principals[n]; ok && n != "" {
			return p, true
		}
	}
	return acl.Principal{}, false
}

// may refuses 403 unless the caller has verb on key.
func (c *caller) may(verb acl.Verb, key, what string) *Error {
	if c.st.Allowed(c.p, verb, key) {
		return nil
	}
	if key == "" && verb == acl.Admin {
		return denied("principal %q may not %s: it needs admin on the prefix \"\"", c.p.Name, what)
	}
	return denied("principal %q may not %s %q: it needs %s on a prefix of the key", c.p.Name, what, key, verb)
}

// lockAs refuses unless the caller may lock key as holder: it needs lock
// on the key and must own the holder (the holder is its name or starts
// with its name and "/").
func (c *caller) lockAs(key, holder, what string) *Error {
	if !acl.OwnsHolder(c.p.Name, holder) {
		return denied("principal %q may act only as holder %q or %q; not as %q", c.p.Name, c.p.Name, c.p.Name+"/...", holder)
	}
	return c.may(acl.Lock, key, what)
}

// redact removes another principal's holder from a held answer unless
// the caller may read key.
func (c *caller) redact(key string, err error) error {
	var e *Error
	if c == nil || !errors.As(err, &e) || e.Holder == "" {
		return err
	}
	if acl.OwnsHolder(c.p.Name, e.Holder) || c.st.Allowed(c.p, acl.Read, key) {
		return err
	}
	r := *e
	r.Holder = ""
	return &r
}

// audit logs an admin action or a force-release.
func (s *Server) audit(ctx context.Context, op, target string, err error) {
	who := ""
	if c := callerFrom(ctx); c != nil {
		who = c.p.Name
	}
	result := "ok"
	if err != nil {
		result = err.Error()
	}
	s.log.Info("audit", "audit", true, "principal", who, "op", op, "target", target, "result", result)
}

// guard wraps an operation: check runs first when ACLs are on (nothing
// runs if it refuses), and a held answer is redacted for the caller.
func guard[Req, Resp any](op func(context.Context, Req) (Resp, error), check func(*caller, Req) *Error, key func(Req) string) func(context.Context, Req) (Resp, error) {
	return func(ctx context.Context, req Req) (Resp, error) {
		c := callerFrom(ctx)
		if c == nil {
			return op(ctx, req)
		}
		if e := check(c, req); e != nil {
			var zero Resp
			return zero, e
		}
		resp, err := op(ctx, req)
		return resp, c.redact(key(req), err)
	}
}

// adminOnly wraps an admin operation: admin on "" when ACLs are on, and an
// audit line either way.
func adminOnly[Req, Resp any](s *Server, name string, op func(context.Context, Req) (Resp, error), target func(Req) string) func(context.Context, Req) (Resp, error) {
	return func(ctx context.Context, req Req) (Resp, error) {
		if c := callerFrom(ctx); c != nil {
			if e := c.may(acl.Admin, "", name); e != nil {
				s.audit(ctx, name, target(req), e)
				var zero Resp
				return zero, e
			}
		}
		resp, err := op(ctx, req)
		if s.fsm.ACL().On {
			s.audit(ctx, name, target(req), err)
		}
		return resp, err
	}
}

// readQuery wraps a GET handler: read on the query's key.
func readQuery(h handlerFunc, what string) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) *Error {
		if c := callerFrom(r.Context()); c != nil {
			if e := c.may(acl.Read, r.URL.Query().Get(api.QueryKey), what); e != nil {
				return e
			}
		}
		return h(w, r)
	}
}

// authenticated wraps a handler that any principal may call.
func authenticated(h handlerFunc) handlerFunc { return h }

// guardRoutes puts the ACL checks in front of the routes and adds the ACL
// routes.
func (s *Server) guardRoutes(m map[string]route) {
	post, get := http.MethodPost, http.MethodGet
	hot := s.guardedCalls()
	m[api.PathAcquire] = route{post, "acquire", body(hot.acquire)}
	m[api.PathRenew] = route{post, "renew", body(guard(s.Renew,
		func(c *caller, r api.RenewRequest) *Error { return c.lockAs(r.Key, r.Holder, "renew") },
		func(r api.RenewRequest) string { return r.Key }))}
	m[api.PathExtend] = route{post, "extend", body(hot.extend)}
	m[api.PathExtendBatch] = route{post, "extend-batch", body(guard(s.ExtendBatch,
		func(c *caller, r api.ExtendBatchRequest) *Error {
			for _, it := range r.Leases {
				if e := c.lockAs(it.Key, r.Holder, "extend"); e != nil {
					return e
				}
			}
			return nil
		},
		func(r api.ExtendBatchRequest) string { return "" }))}
	m[api.PathRelease] = route{post, "release", body(hot.release)}
	m[api.PathCheck] = route{get, "check", readQuery(m[api.PathCheck].handle, "check")}
	m[api.PathLock] = route{get, "lock", readQuery(m[api.PathLock].handle, "read")}
	m[api.PathLocks] = route{get, "locks", s.guardedList(m[api.PathLocks].handle)}
	joinTarget := func(r api.JoinRequest) string { return r.ID }
	m[api.PathJoin] = route{post, "join", body(adminOnly(s, "join", s.Join, joinTarget))}
	m[api.PathRemove] = route{post, "remove", body(adminOnly(s, "remove", s.Remove, func(r api.RemoveRequest) string { return r.ID }))}
	m[api.PathAnnounce] = route{post, "announce", body(adminOnly(s, "announce", s.Announce, joinTarget))}

	m[api.PathACLBootstrap] = route{post, "acl-bootstrap", body(s.aclBootstrapCall)}
	m[api.PathACLWhoAmI] = route{get, "acl-whoami", authenticated(func(w http.ResponseWriter, r *http.Request) *Error {
		out := api.WhoAmI{Auth: s.fsm.ACL().On}
		if c := callerFrom(r.Context()); c != nil {
			out.Principal = c.p.Name
		}
		return reply(w, out, nil)
	})}
	name := func(r api.ACLDeleteRequest) string { return r.Name }
	m[api.PathACLTokenCreate] = route{post, "acl-token-create", body(adminOnly(s, "acl-token-create", s.ACLCreateToken, func(r api.ACLTokenRequest) string { return r.Name }))}
	m[api.PathACLTokenDelete] = route{post, "acl-token-delete", body(adminOnly(s, "acl-token-delete", s.ACLDeleteToken, name))}
	m[api.PathACLPolicySet] = route{post, "acl-policy-set", body(adminOnly(s, "acl-policy-set", s.ACLSetPolicy, func(r api.ACLPolicy) string { return r.Name }))}
	m[api.PathACLPolicyDelete] = route{post, "acl-policy-delete", body(adminOnly(s, "acl-policy-delete", s.ACLDeletePolicy, name))}
	m[api.PathACLTokens] = route{get, "acl-tokens", s.adminGet(func(ctx context.Context) (any, error) { return s.ACLTokens(ctx) })}
	m[api.PathACLPolicies] = route{get, "acl-policies", s.adminGet(func(ctx context.Context) (any, error) { return s.ACLPolicies(ctx) })}
}

// adminGet wraps an admin read (admin on ""; not audited: it changes
// nothing).
func (s *Server) adminGet(op func(context.Context) (any, error)) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) *Error {
		if c := callerFrom(r.Context()); c != nil {
			if e := c.may(acl.Admin, "", "read the ACLs"); e != nil {
				return e
			}
		}
		v, err := op(r.Context())
		return reply(w, v, err)
	}
}

// guardedRelease: a principal releases its own holders with lock on the
// key; releasing another's (force-release) needs admin on the key, and is
// audited.
func (s *Server) guardedRelease(ctx context.Context, req api.ReleaseRequest) (api.ReleaseResponse, error) {
	c := callerFrom(ctx)
	if c == nil {
		return s.Release(ctx, req)
	}
	if acl.OwnsHolder(c.p.Name, req.Holder) {
		if e := c.may(acl.Lock, req.Key, "release"); e != nil {
			return api.ReleaseResponse{}, e
		}
		resp, err := s.Release(ctx, req)
		return resp, c.redact(req.Key, err)
	}
	if !c.st.Allowed(c.p, acl.Admin, req.Key) {
		e := denied("principal %q may act only as holder %q or %q; releasing %q's lease needs admin on the key", c.p.Name, c.p.Name, c.p.Name+"/...", req.Holder)
		s.audit(ctx, "force-release", req.Key+" "+req.Holder, e)
		return api.ReleaseResponse{}, e
	}
	resp, err := s.Release(ctx, req)
	s.audit(ctx, "force-release", req.Key+" "+req.Holder, err)
	return resp, err
}

// guardedList: read on the prefix; leases below it that the caller may
// not read (a longer deny) are left out of the page.
func (s *Server) guardedList(h handlerFunc) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) *Error {
		c := callerFrom(r.Context())
		if c == nil {
			return h(w, r)
		}
		if e := c.may(acl.Read, r.URL.Query().Get(api.QueryPrefix), "list"); e != nil {
			return e
		}
		l, err := s.listPage(r)
		if err == nil {
			l.Locks = readable(c, l.Locks, func(x api.Lease) string { return x.Key })
		}
		return reply(w, l, err)
	}
}

// readable keeps the items of a page whose keys c may read: a page below
// a prefix c may read can hold keys under a longer deny.
func readable[T any](c *caller, items []T, key func(T) string) []T {
	kept := items[:0]
	for _, x := range items {
		if c.st.Allowed(c.p, acl.Read, key(x)) {
			kept = append(kept, x)
		}
	}
	return kept
}

// The ACL operations. Changes are proposed through raft on the leader and
// answer once applied on it; every node then enforces them.

func (s *Server) aclBootstrapCall(ctx context.Context, _ struct{}) (api.ACLSecret, error) {
	out, err := s.ACLBootstrap(ctx)
	s.audit(ctx, "acl-bootstrap", acl.BootstrapPrincipal, err)
	return out, err
}

// ACLBootstrap turns ACLs on with the principal admin (policy admin:
// every verb on every key) and answers its secret, once per cluster; later
// calls are refused permission_denied.
func (s *Server) ACLBootstrap(ctx context.Context) (api.ACLSecret, error) {
	if s.fsm.ACL().On {
		return api.ACLSecret{}, s.fail(denied("the cluster's ACLs are already bootstrapped; bootstrap works once"))
	}
	secret, err := acl.NewSecret()
	if err != nil {
		return api.ACLSecret{}, s.fail(&Error{Code: api.CodeInternal, Message: err.Error()})
	}
	if e := s.proposeACL(fsm.ACLChange{Kind: fsm.ACLBootstrap, Principal: acl.Principal{TokenHash: acl.HashToken(secret)}}); e != nil {
		return api.ACLSecret{}, s.fail(e)
	}
	return api.ACLSecret{Principal: acl.BootstrapPrincipal, Policies: []string{acl.AdminPolicy}, Secret: secret}, nil
}

// ACLCreateToken creates (or with Replace replaces) a principal and
// answers its new secret.
func (s *Server) ACLCreateToken(ctx context.Context, req api.ACLTokenRequest) (api.ACLSecret, error) {
	p := acl.Principal{Name: req.Name, Policies: req.Policies}
	if err := p.Check(); err != nil {
		return api.ACLSecret{}, s.fail(invalid("name", "%v", err))
	}
	out := api.ACLSecret{Principal: p.Name, Policies: append([]string{}, p.Policies...)}
	if !req.NoSecret {
		secret, err := acl.NewSecret()
		if err != nil {
			return api.ACLSecret{}, s.fail(&Error{Code: api.CodeInternal, Message: err.Error()})
		}
		p.TokenHash, out.Secret = acl.HashToken(secret), secret
	}
	if e := s.proposeACL(fsm.ACLChange{Kind: fsm.ACLSetPrincipal, Principal: p, Replace: req.Replace}); e != nil {
		return api.ACLSecret{}, s.fail(e)
	}
	return out, nil
}

// ACLDeleteToken deletes a principal; its token stops working at once.
func (s *Server) ACLDeleteToken(ctx context.Context, req api.ACLDeleteRequest) (api.ACLDeleted, error) {
	if e := s.proposeACL(fsm.ACLChange{Kind: fsm.ACLDeletePrincipal, Name: req.Name}); e != nil {
		return api.ACLDeleted{}, s.fail(e)
	}
	return api.ACLDeleted{Deleted: req.Name}, nil
}

// ACLSetPolicy adds or replaces a policy.
func (s *Server) ACLSetPolicy(ctx context.Context, req api.ACLPolicy) (api.ACLPolicy, error) {
	p := acl.Policy{Name: req.Name}
	for i, r := range req.Rules {
		v, err := acl.ParseVerbs(strings.Join(r.Verbs, ","))
		if err != nil {
			return api.ACLPolicy{}, s.fail(invalid("rules", "rules[%d]: %v", i, err))
		}
		p.Rules = append(p.Rules, acl.Rule{Prefix: r.Prefix, Verbs: v, Deny: r.Deny})
	}
	if err := p.Check(); err != nil {
		return api.ACLPolicy{}, s.fail(invalid("rules", "%v", err))
	}
	if e := s.proposeACL(fsm.ACLChange{Kind: fsm.ACLSetPolicy, Policy: p}); e != nil {
		return api.ACLPolicy{}, s.fail(e)
	}
	return wirePolicy(p), nil
}

// ACLDeletePolicy deletes a policy; principals naming it lose its rules.
func (s *Server) ACLDeletePolicy(ctx context.Context, req api.ACLDeleteRequest) (api.ACLDeleted, error) {
	if e := s.proposeACL(fsm.ACLChange{Kind: fsm.ACLDeletePolicy, Name: req.Name}); e != nil {
		return api.ACLDeleted{}, s.fail(e)
	}
	return api.ACLDeleted{Deleted: req.Name}, nil
}

// ACLTokens lists the principals (never their secrets).
func (s *Server) ACLTokens(ctx context.Context) (api.ACLTokenList, error) {
	if _, e := s.readNow(); e != nil {
		return api.ACLTokenList{}, s.fail(e)
	}
	st := s.fsm.ACL()
	out := api.ACLTokenList{Principals: []api.ACLPrincipal{}}
	for _, n := range acl.Names(st.Principals) {
		p := st.Principals[n]
		out.Principals = append(out.Principals, api.ACLPrincipal{Name: n, Policies: append([]string{}, p.Policies...), HasToken: p.HasToken()})
	}
	return out, nil
}

// ACLPolicies lists the policies.
func (s *Server) ACLPolicies(ctx context.Context) (api.ACLPolicyList, error) {
	if _, e := s.readNow(); e != nil {
		return api.ACLPolicyList{}, s.fail(e)
	}
	st := s.fsm.ACL()
	out := api.ACLPolicyList{Policies: []api.ACLPolicy{}}
	for _, n := range acl.Names(st.Policies) {
		out.Policies = append(out.Policies, wirePolicy(st.Policies[n]))
	}
	return out, nil
}

func wirePolicy(p acl.Policy) api.ACLPolicy {
	out := api.ACLPolicy{Name: p.Name, Rules: []api.ACLRule{}}
	for _, r := range p.Rules {
		out.Rules = append(out.Rules, api.ACLRule{Prefix: r.Prefix, Verbs: strings.Split(r.Verbs.String(), ","), Deny: r.Deny})
	}
	return out
}

func (s *Server) proposeACL(c fsm.ACLChange) *Error {
	if e := s.writable(); e != nil {
		return e
	}
	res, err := s.propose(fsm.Command{Op: fsm.OpACL, ACL: &c})
	if err != nil {
		if errors.Is(err, fsm.ErrBadCommand) {
			return invalid("body", "%v", err)
		}
		return proposalError(err)
	}
	switch {
	case res.Err == nil:
		return nil
	case errors.Is(res.Err, acl.ErrBootstrapped):
		return denied("the cluster's ACLs are already bootstrapped; bootstrap works once")
	case errors.Is(res.Err, acl.ErrNotBootstrapped):
		return invalid("acl", "the cluster's ACLs are not bootstrapped: run fencelock acl bootstrap first (nothing made before it may survive it)")
	case errors.Is(res.Err, acl.ErrLastAdmin):
		return invalid("name", "refused: no principal would be left with admin on \"\", and nothing could change the ACLs again")
	case errors.Is(res.Err, acl.ErrNotFound):
		return newError(api.CodeNotFound, "%v", res.Err)
	case errors.Is(res.Err, acl.ErrExists):
		return invalid("name", "a principal named %q exists; pass replace to give it a new token", c.Principal.Name)
	}
	return invalid("body", "%v", res.Err)
}

// aclKnown reports whether this node has applied every entry its log held
// when it started. Until then its tables may be older than its own log
// (a restarted follower applies nothing until a leader tells it what is
// committed), so tables that say ACLs are off cannot be believed.
func (s *Server) aclKnown() bool {
	if s.aclCaughtUp.Load() {
		return true
	}
	if max(s.node.raft.AppliedIndex(), s.fsm.AppliedIndex()) < s.startIndex {
		return false
	}
	s.aclCaughtUp.Store(true)
	return true
}
