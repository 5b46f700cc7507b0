// Package auth decides who a call is and whether it may run: it
// authenticates a call to a principal of the cluster's ACL tables (a
// bearer token, or a verified client certificate), checks the principal
// against what the call's route needs (a Need), and, after the call,
// audits admin actions and hides another principal's holder from a
// caller that may not read its key. The transports pass answers that
// span many keys (lists, overviews, metrics, watches) through its
// Redact functions. It knows no lock rules: the tables are the
// replicated state's (internal/fsm, internal/acl), and what a route
// needs is declared beside the route (internal/httpapi).
//
// Until the cluster's ACLs are bootstrapped every call runs as it came,
// without a principal; a call made in-process, not through a transport,
// is trusted.
package auth

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/acl"
	"github.com/fencelock/fencelock/internal/service"
)

// Guard authenticates calls and checks them against what their routes
// need. It keeps the calls it let in that are still running and, when
// the tables change (Run), checks them again: a call whose credential or
// permission was revoked ends at once, its context cancelled with the
// refusal as its cause.
type Guard struct {
	tables Tables
	reads  *readIndex   // questions to the leader (confirmedACL)
	log    *slog.Logger // audit lines

	mu      sync.Mutex
	live    map[*caller]struct{}
	revoked atomic.Int64
}

// NewGuard is a guard over tables that writes its audit lines to log.
// Close it once the transports have drained.
func NewGuard(tables Tables, log *slog.Logger) *Guard {
	return &Guard{tables: tables, reads: newReadIndex(), log: log, live: map[*caller]struct{}{}}
}

// Close ends the question to the leader that is out, if any, and waits
// for it; calls that need the tables confirmed answer 503 from then on.
func (g *Guard) Close() { g.reads.close() }

// caller is the principal a call acts as: how it authenticated, the
// tables it was last checked against, and what its route checked.
type caller struct {
	g          *Guard
	name       string // the principal, as authenticated
	credential string
	cs         *tls.ConnectionState
	cur        atomic.Pointer[view]
	cancel     context.CancelCauseFunc // nil: not tracked (an open route)

	mu     sync.Mutex
	checks []checked
}

// view is the caller's principal in one version of the tables; ok is
// false once the credential no longer names it.
type view struct {
	st *acl.State
	p  acl.Principal
	ok bool
}

type checked struct {
	n   Need
	sub Subject
}

type callerKey struct{}

func callerFrom(ctx context.Context) *caller {
	c, _ := ctx.Value(callerKey{}).(*caller)
	return c
}

// current is the caller in the tables as this node has applied them now.
// It takes no lock of the tables, so a filter of events may call it.
func (c *caller) current() view {
	st, _ := c.g.tables.ACL()
	if v := c.cur.Load(); v != nil && v.st == st {
		return *v
	}
	p, ok := resolve(st, c.credential, c.cs)
	v := &view{st: st, p: p, ok: ok && st.On && p.Name == c.name}
	c.cur.Store(v)
	return *v
}

// Principal is the name of ctx's authenticated principal; "" when ACLs
// are off or the call carried no credential.
func Principal(ctx context.Context) string {
	if c := callerFrom(ctx); c != nil {
		return c.name
	}
	return ""
}

// Authenticate finds the principal of a call when ACLs are on: a bearer
// token (credential is the Authorization header's value), else a verified
// client certificate whose SAN (DNS, email) or CN names a principal. A
// call with neither is refused 401, unless its route is open. It answers
// the context to run the call with.
//
// A route that is not open is checked against tables at least as new as
// the leader's when the call arrived (confirmedACL), and the call
// is kept until its context ends: a change of the tables that revokes
// its credential or its permission cancels that context.
func (g *Guard) Authenticate(ctx context.Context, credential string, cs *tls.ConnectionState, n Need) (context.Context, *service.Error) {
	var st *acl.State
	switch n.kind {
	case kindOpen:
		st, _ = g.tables.ACL()
	case kindPrincipalHere:
		var e *service.Error
		if st, e = g.confirmedOrOwnACL(ctx); e != nil {
			return nil, e
		}
	default:
		var e *service.Error
		if st, e = g.confirmedACL(ctx); e != nil {
			return nil, e
		}
	}
	if !st.On {
		return ctx, nil
	}
	if credential != "" {
		scheme, _, _ := strings.Cut(credential, " ")
		if !strings.EqualFold(scheme, "Bearer") {
			return nil, service.Unauthenticated("the Authorization header must be \"Bearer <secret>\"")
		}
	}
	p, ok := resolve(st, credential, cs)
	p, ok = g.plantTokenCache(credential, p, ok)
	switch {
	case ok:
	case credential != "":
		return nil, service.Unauthenticated("unknown or deleted token")
	case n.kind == kindOpen:
		return ctx, nil
	default:
		return nil, service.Unauthenticated("authentication required: send Authorization: Bearer <secret> (fencelock --auth-token, FENCELOCK_AUTH_TOKEN)")
	}
	c := &caller{g: g, name: p.Name, credential: credential, cs: cs}
	c.cur.Store(&view{st: st, p: p, ok: true})
	if n.kind != kindOpen {
		ctx, c.cancel = context.WithCancelCause(ctx)
		g.track(c)
		context.AfterFunc(ctx, func() { g.untrack(c) })
	}
	return context.WithValue(ctx, callerKey{}, c), nil
}

// resolve is the principal a credential (or, without one, a client
// certificate) names in st.
func resolve(st *acl.State, credential string, cs *tls.ConnectionState) (acl.Principal, bool) {
	if credential != "" {
		scheme, secret, _ := strings.Cut(credential, " ")
		if !strings.EqualFold(scheme, "Bearer") {
			return acl.Principal{}, false
		}
		return st.ByToken(strings.TrimSpace(secret))
	}
	return certPrincipal(st, cs)
}

func (g *Guard) track(c *caller) {
	g.mu.Lock()
	g.live[c] = struct{}{}
	g.mu.Unlock()
}

func (g *Guard) untrack(c *caller) {
	g.mu.Lock()
	delete(g.live, c)
	g.mu.Unlock()
}

// Live is the number of calls with a principal running now; Revoked
// counts those ended because the tables changed under them.
func (g *Guard) Live() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.live)
}

// Revoked counts the calls ended because a change of the tables revoked
// their credential or their permission.
func (g *Guard) Revoked() int64 { return g.revoked.Load() }

// Run checks the running calls again each time the tables change, until
// stop is closed.
func (g *Guard) Run(stop <-chan struct{}) {
	_, changed := g.tables.ACLWatch()
	for {
		select {
		case <-stop:
			return
		case <-changed:
		}
		// The next change's channel first, then the check: a change
		// applied while the check reads the tables closes that channel,
		// and is checked again. (Taken after the check, a change that
		// landed during it went unchecked: the calls it revoked ran on.)
		_, changed = g.tables.ACLWatch()
		g.Recheck()
	}
}

// Recheck checks every running call against the tables as they are now,
// and ends those they no longer allow.
func (g *Guard) Recheck() {
	g.mu.Lock()
	calls := make([]*caller, 0, len(g.live))
	for c := range g.live {
		calls = append(calls, c)
	}
	g.mu.Unlock()
	for _, c := range calls {
		if e := c.recheck(); e != nil {
			g.revoked.Add(1)
			c.cancel(e)
		}
	}
}

// recheck is why the tables as they are now no longer allow c, or nil.
func (c *caller) recheck() *service.Error {
	v := c.current()
	if !v.ok {
		return service.Unauthenticated("the ACLs changed while the call ran: its token was deleted or replaced, or its principal deleted")
	}
	c.mu.Lock()
	checks := c.checks
	c.mu.Unlock()
	for _, ck := range checks {
		if e := c.g.check(context.Background(), false, v, ck.n, "", ck.sub); e != nil {
			e.Message = "the ACLs changed while the call ran: " + e.Message
			return e
		}
	}
	return nil
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
func (v view) may(verb acl.Verb, key, what string) *service.Error {
	if plantDecisionCache(v, verb, key, v.st.Allowed(v.p, verb, key)) {
		return nil
	}
	if key == "" && verb == acl.Admin {
		return service.Denied("principal %q may not %s: it needs admin on the prefix \"\"", v.p.Name, what)
	}
	return service.Denied("principal %q may not %s %q: it needs %s on a prefix of the key", v.p.Name, what, key, verb)
}

// lockAs refuses unless the caller may lock key as holder: it needs lock
// on the key and must own the holder (the holder is its name or starts
// with its name and "/").
func (v view) lockAs(key, holder, what string) *service.Error {
	if !acl.OwnsHolder(v.p.Name, holder) {
		return service.Denied("principal %q may act only as holder %q or %q; not as %q", v.p.Name, v.p.Name, v.p.Name+"/...", holder)
	}
	return v.may(acl.Lock, key, what)
}

// redact removes another principal's holder from a held answer unless
// the caller may read every key of keys.
func (v view) redact(err error, keys ...string) error {
	var e *service.Error
	if !errors.As(err, &e) || e.Holder == "" {
		return err
	}
	if acl.OwnsHolder(v.p.Name, e.Holder) {
		return err
	}
	visible := v.ok
	for _, k := range keys {
		visible = visible && v.st.Allowed(v.p, acl.Read, k)
	}
	if visible {
		return err
	}
	r := *e
	r.Holder = ""
	return &r
}

// audit logs an admin action or a force-release.
func (g *Guard) audit(ctx context.Context, op, target string, err error) {
	result := "ok"
	if err != nil {
		result = err.Error()
	}
	g.log.Info("audit", "audit", true, "principal", Principal(ctx), "op", op, "target", target, "result", result)
}

// Subject is what a call is about, as its route reads it from the
// request: the keys (or prefix) it needs its verb on, the holder it acts
// as, the key a held answer's holder is on ("" for no one key), and the
// target an audit line names.
type Subject struct {
	Keys   []string
	Holder string
	Key    string
	Target string
	// Prefix: Keys holds one prefix of keys (list, overview, a watch of
	// a prefix), not keys.
	Prefix bool
	// Field names Keys in a refusal of their form; "" is "key", or
	// "prefix" with Prefix.
	Field string
}

// checkForm refuses, once ACLs are on, keys a prefix rule could misread
// (acl.CheckKey).
func (sub Subject) checkForm() *service.Error {
	field := sub.Field
	switch {
	case field != "":
	case sub.Prefix:
		field = "prefix"
	default:
		field = "key"
	}
	for _, k := range sub.Keys {
		check := acl.CheckKey
		if sub.Prefix {
			check = acl.CheckPrefix
		}
		if err := check(k); err != nil {
			return service.Invalid(field, "%s %q: %s", field, k, strings.TrimPrefix(err.Error(), "acl: "))
		}
	}
	return nil
}

// NeedsSubject reports whether Check and Answer read the subject of a
// call run with ctx under n: only when the call has a principal, or n
// audits every outcome. Without ACLs a transport need not build it.
func (g *Guard) NeedsSubject(ctx context.Context, n Need) bool {
	return n.audit == auditAlways || callerFrom(ctx) != nil
}

// Check refuses, before the call runs, a caller that does not have what
// n needs for sub; op names the call in audit lines. A call without a
// principal (ACLs off, or an open route) is not checked. What it checked
// is checked again whenever the tables change while the call runs.
func (g *Guard) Check(ctx context.Context, n Need, op string, sub Subject) *service.Error {
	if n.kind == kindUnset {
		return &service.Error{Code: api.CodeInternal, Message: "internal error: the route " + op + " declares no permission"}
	}
	c := callerFrom(ctx)
	if c == nil {
		return nil
	}
	if e := sub.checkForm(); e != nil {
		return e
	}
	v := c.current()
	if !v.ok {
		return service.Unauthenticated("unknown or deleted token")
	}
	if e := g.check(ctx, true, v, n, op, sub); e != nil {
		return e
	}
	if c.cancel != nil {
		c.mu.Lock()
		c.checks = append(c.checks, checked{n, sub})
		c.mu.Unlock()
	}
	return nil
}

// check is Check's decision under v; without audits (a re-check) it
// writes no audit line.
func (g *Guard) check(ctx context.Context, audits bool, v view, n Need, op string, sub Subject) *service.Error {
	audit := func(op, target string, e error) {
		if audits {
			g.audit(ctx, op, target, e)
		}
	}
	switch n.kind {
	case kindKeys:
		for _, k := range sub.Keys {
			if e := v.may(n.verb, k, n.what); e != nil {
				return e
			}
		}
	case kindLockAs:
		for _, k := range sub.Keys {
			if e := v.lockAs(k, sub.Holder, n.what); e != nil {
				return e
			}
		}
	case kindOwnHolder:
		if !acl.OwnsHolder(v.p.Name, sub.Holder) {
			return service.Denied("principal %q may %s only as holder %q or %q; not as %q", v.p.Name, n.what, v.p.Name, v.p.Name+"/...", sub.Holder)
		}
	case kindRelease:
		key := first(sub.Keys)
		if acl.OwnsHolder(v.p.Name, sub.Holder) {
			return v.may(acl.Lock, key, "release")
		}
		if !v.st.Allowed(v.p, acl.Admin, key) {
			e := service.Denied("principal %q may act only as holder %q or %q; releasing %q's lease needs admin on the key", v.p.Name, v.p.Name, v.p.Name+"/...", sub.Holder)
			audit("force-release", key+" "+sub.Holder, e)
			return e
		}
	case kindAdmin:
		if e := v.may(acl.Admin, "", n.what); e != nil {
			if n.audit != auditNone {
				audit(op, sub.Target, e)
			}
			return e
		}
	}
	return nil
}

// Answer passes a call's outcome back to its caller: it writes the audit
// line n asks for and hides another principal's holder in a held answer
// from a caller that may not read its key.
func (g *Guard) Answer(ctx context.Context, n Need, op string, sub Subject, err error) error {
	c := callerFrom(ctx)
	if n.audit == auditAlways {
		g.audit(ctx, op, sub.Target, err)
	}
	if c == nil {
		return err
	}
	switch n.kind {
	case kindAdmin:
		if n.audit == auditChanges {
			g.audit(ctx, op, sub.Target, err)
		}
	case kindRelease:
		if !acl.OwnsHolder(c.name, sub.Holder) {
			g.audit(ctx, "force-release", first(sub.Keys)+" "+sub.Holder, err)
			return err
		}
		return c.current().redact(err, sub.Key)
	case kindLockAs, kindOwnHolder:
		var ke *service.KeyedError
		if errors.As(err, &ke) {
			return c.current().redact(err, ke.Key, sub.Key)
		}
		return c.current().redact(err, sub.Key)
	}
	return err
}

func first(keys []string) string {
	if len(keys) == 0 {
		return ""
	}
	return keys[0]
}
