package auth

import (
	"github.com/fencelock/fencelock/internal/acl"
)

// Need is what a route needs of its caller once the cluster's ACLs are
// on, declared beside the route. The zero Need is no declaration at all:
// Check refuses every call of a route that has one, and Valid says so,
// so that a route whose permission is forgotten is caught by a test of
// the route table rather than left open.
type Need struct {
	kind  kind
	verb  acl.Verb // kindKeys
	what  string   // how a refusal names the call: "acquire", "read", ...
	audit audit
}

type kind uint8

const (
	kindUnset         kind = iota
	kindOpen               // no principal needed
	kindPrincipal          // any principal
	kindPrincipalHere      // any principal, by this node's own tables when no leader confirms them
	kindKeys               // verb on every key of the subject
	kindLockAs             // lock on every key of the subject, as a holder the caller owns
	kindOwnHolder          // a holder the caller owns
	kindRelease            // own holder: lock on the key; another's: admin on the key, audited
	kindAdmin              // admin on every key ("")
)

type audit uint8

const (
	auditNone    audit = iota
	auditChanges       // refusals, and outcomes of calls with a principal
	auditAlways        // every outcome
)

// Open needs nothing: liveness and readiness probes, the identity a
// leader asks of a node before adding it (names and ids, no secrets).
func Open() Need { return Need{kind: kindOpen} }

// Bootstrap is open and audited: it refuses itself once done.
func Bootstrap() Need { return Need{kind: kindOpen, audit: auditAlways} }

// Authenticated needs any principal.
func Authenticated() Need { return Need{kind: kindPrincipal} }

// AuthenticatedHere needs any principal, as Authenticated, but answers
// when no leader can confirm the tables: the call is then checked
// against the tables this node has applied, if it can vouch for them
// (Tables.ConfirmedOrOwnACL). Only for what a node must answer when the
// cluster has lost its quorum — the members view: who is in the cluster
// and how each is, no lock, holder or secret — since a change of the
// tables committed where this node cannot reach does not reach it then.
func AuthenticatedHere() Need { return Need{kind: kindPrincipalHere} }

// Read needs read on the subject's keys (or prefix).
func Read(what string) Need { return Need{kind: kindKeys, verb: acl.Read, what: what} }

// LockAs needs lock on every key of the subject, acting as a holder the
// caller owns (its name, or its name and "/...").
func LockAs(what string) Need { return Need{kind: kindLockAs, what: what} }

// OwnHolder needs a holder the caller owns (sessions: the state machine
// then refuses a session that is not that holder's).
func OwnHolder(what string) Need { return Need{kind: kindOwnHolder, what: what} }

// Release needs lock on the key to release a holder the caller owns, and
// admin on the key to release another's (a force-release, audited).
func Release() Need { return Need{kind: kindRelease} }

// Admin needs admin on every key; refusals and outcomes are audited.
func Admin(what string) Need { return Need{kind: kindAdmin, what: what, audit: auditChanges} }

// AdminRead needs admin on every key, and is not audited: it changes
// nothing.
func AdminRead(what string) Need { return Need{kind: kindAdmin, what: what} }

// Valid says whether n declares anything.
func (n Need) Valid() bool { return n.kind != kindUnset }

// String is n as docs/API.md names it.
func (n Need) String() string {
	switch n.kind {
	case kindOpen:
		return "open"
	case kindPrincipal:
		return "any principal"
	case kindPrincipalHere:
		return "any principal (this node's tables when no leader answers)"
	case kindKeys:
		return n.verb.String()
	case kindLockAs:
		return "lock, own holder"
	case kindOwnHolder:
		return "own holder"
	case kindRelease:
		return "lock, own holder (admin for another's)"
	case kindAdmin:
		return "admin"
	}
	return "undeclared"
}
