// Package auth decides who a call is and whether it may run: it
// authenticates a call to a principal of the cluster's ACL tables (a
// bearer token, or a verified client certificate), checks the principal
// against what the call's route needs (a Need), and, after the call,
// audits admin actions and hides another principal's holder from a
// caller that may not read its key. It knows no lock rules: the tables
// are the replicated state's (internal/fsm, internal/acl), and what a
// route needs is declared beside the route (internal/httpapi).
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

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/acl"
	"github.com/fencelock/fencelock/internal/service"
)

// Tables is where the ACL tables come from: the tables as this node has
// applied them, and whether it can vouch that they are current enough to
// believe "off".
type Tables interface {
	ACL() (st *acl.State, known bool)
}

// Guard authenticates calls and checks them against what their routes
// need.
type Guard struct {
	tables Tables
	log    *slog.Logger // audit lines
}

// NewGuard is a guard over tables that writes its audit lines to log.
func NewGuard(tables Tables, log *slog.Logger) *Guard { return &Guard{tables: tables, log: log} }

// caller is the principal a call acts as, and the tables it was
// authenticated against.
type caller struct {
	st *acl.State
	p  acl.Principal
}

type callerKey struct{}

func callerFrom(ctx context.Context) *caller {
	c, _ := ctx.Value(callerKey{}).(*caller)
	return c
}

// Principal is the name of ctx's authenticated principal; "" when ACLs
// are off or the call carried no credential.
func Principal(ctx context.Context) string {
	if c := callerFrom(ctx); c != nil {
		return c.p.Name
	}
	return ""
}

// Visible is what ctx's caller may read: nil (everything) when the call
// has no principal, else a test of one key. Pages of leases, overviews
// and watches under a prefix the caller may read can hold keys under a
// longer deny; they leave those out.
func Visible(ctx context.Context) func(key string) bool {
	c := callerFrom(ctx)
	if c == nil {
		return nil
	}
	return func(key string) bool { return c.st.Allowed(c.p, acl.Read, key) }
}

// ReadsAll is what ctx's caller may be told about whole prefixes: nil
// (everything) when the call has no principal, else a test of whether it
// may read every key under a prefix (acl.State.ReadsAll). Counts by
// prefix and the table's totals are shown only where it is true.
func ReadsAll(ctx context.Context) func(prefix string) bool {
	c := callerFrom(ctx)
	if c == nil {
		return nil
	}
	return func(prefix string) bool { return c.st.ReadsAll(c.p, prefix) }
}

// Authenticate finds the principal of a call when ACLs are on: a bearer
// token (credential is the Authorization header's value), else a verified
// client certificate whose SAN (DNS, email) or CN names a principal. A
// call with neither is refused 401, unless its route is open. It answers
// the context to run the call with.
func (g *Guard) Authenticate(ctx context.Context, credential string, cs *tls.ConnectionState, n Need) (context.Context, *service.Error) {
	st, known := g.tables.ACL()
	if !st.On {
		if n.kind == kindOpen || known {
			return ctx, nil
		}
		return nil, service.Unavailable("this node has not yet applied the log it had when it started, so it cannot tell whether ACLs are on; retry, or ask another node")
	}
	var (
		p  acl.Principal
		ok bool
	)
	if credential != "" {
		scheme, secret, _ := strings.Cut(credential, " ")
		if !strings.EqualFold(scheme, "Bearer") {
			return nil, service.Unauthenticated("the Authorization header must be \"Bearer <secret>\"")
		}
		if p, ok = st.ByToken(strings.TrimSpace(secret)); !ok {
			return nil, service.Unauthenticated("unknown or deleted token")
		}
	} else if p, ok = certPrincipal(st, cs); !ok {
		if n.kind == kindOpen {
			return ctx, nil
		}
		return nil, service.Unauthenticated("authentication required: send Authorization: Bearer <secret> (fencelock --auth-token, FENCELOCK_AUTH_TOKEN)")
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
func (c *caller) may(verb acl.Verb, key, what string) *service.Error {
	if c.st.Allowed(c.p, verb, key) {
		return nil
	}
	if key == "" && verb == acl.Admin {
		return service.Denied("principal %q may not %s: it needs admin on the prefix \"\"", c.p.Name, what)
	}
	return service.Denied("principal %q may not %s %q: it needs %s on a prefix of the key", c.p.Name, what, key, verb)
}

// lockAs refuses unless the caller may lock key as holder: it needs lock
// on the key and must own the holder (the holder is its name or starts
// with its name and "/").
func (c *caller) lockAs(key, holder, what string) *service.Error {
	if !acl.OwnsHolder(c.p.Name, holder) {
		return service.Denied("principal %q may act only as holder %q or %q; not as %q", c.p.Name, c.p.Name, c.p.Name+"/...", holder)
	}
	return c.may(acl.Lock, key, what)
}

// redact removes another principal's holder from a held answer unless
// the caller may read every key of keys.
func (c *caller) redact(err error, keys ...string) error {
	var e *service.Error
	if !errors.As(err, &e) || e.Holder == "" {
		return err
	}
	if acl.OwnsHolder(c.p.Name, e.Holder) {
		return err
	}
	visible := true
	for _, k := range keys {
		visible = visible && c.st.Allowed(c.p, acl.Read, k)
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

// Check refuses, before the call runs, a caller that does not have what
// n needs for sub; op names the call in audit lines. A call without a
// principal (ACLs off, or an open route) is not checked.
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
	switch n.kind {
	case kindKeys:
		for _, k := range sub.Keys {
			if e := c.may(n.verb, k, n.what); e != nil {
				return e
			}
		}
	case kindLockAs:
		for _, k := range sub.Keys {
			if e := c.lockAs(k, sub.Holder, n.what); e != nil {
				return e
			}
		}
	case kindOwnHolder:
		if !acl.OwnsHolder(c.p.Name, sub.Holder) {
			return service.Denied("principal %q may %s only as holder %q or %q; not as %q", c.p.Name, n.what, c.p.Name, c.p.Name+"/...", sub.Holder)
		}
	case kindRelease:
		key := first(sub.Keys)
		if acl.OwnsHolder(c.p.Name, sub.Holder) {
			return c.may(acl.Lock, key, "release")
		}
		if !c.st.Allowed(c.p, acl.Admin, key) {
			e := service.Denied("principal %q may act only as holder %q or %q; releasing %q's lease needs admin on the key", c.p.Name, c.p.Name, c.p.Name+"/...", sub.Holder)
			g.audit(ctx, "force-release", key+" "+sub.Holder, e)
			return e
		}
	case kindAdmin:
		if e := c.may(acl.Admin, "", n.what); e != nil {
			if n.audit != auditNone {
				g.audit(ctx, op, sub.Target, e)
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
		if !acl.OwnsHolder(c.p.Name, sub.Holder) {
			g.audit(ctx, "force-release", first(sub.Keys)+" "+sub.Holder, err)
			return err
		}
		return c.redact(err, sub.Key)
	case kindLockAs, kindOwnHolder:
		var ke *service.KeyedError
		if errors.As(err, &ke) {
			return c.redact(err, ke.Key, sub.Key)
		}
		return c.redact(err, sub.Key)
	}
	return err
}

func first(keys []string) string {
	if len(keys) == 0 {
		return ""
	}
	return keys[0]
}
