package api

// Authentication and ACLs (docs/SECURITY.md). Once a cluster is
// bootstrapped, every call but /healthz, /readyz, /v1/cluster/identity
// and /v1/acl/bootstrap carries "Authorization: Bearer <secret>" (or a
// verified client certificate naming a principal); a missing or unknown
// credential is CodeUnauthenticated (401), a call the caller's policies
// do not allow CodePermissionDenied (403). Nothing changes either way.
const (
	PathACLBootstrap    = "/v1/acl/bootstrap"     // POST {} -> ACLSecret, once per cluster
	PathACLWhoAmI       = "/v1/acl/whoami"        // GET -> WhoAmI
	PathACLTokens       = "/v1/acl/tokens"        // GET -> ACLTokenList
	PathACLTokenCreate  = "/v1/acl/token/create"  // POST ACLTokenRequest -> ACLSecret
	PathACLTokenDelete  = "/v1/acl/token/delete"  // POST ACLDeleteRequest -> ACLDeleted
	PathACLPolicies     = "/v1/acl/policies"      // GET -> ACLPolicyList
	PathACLPolicySet    = "/v1/acl/policy/set"    // POST ACLPolicy -> ACLPolicy
	PathACLPolicyDelete = "/v1/acl/policy/delete" // POST ACLDeleteRequest -> ACLDeleted
	// PathACLRevision is open: a node that does not lead asks the leader
	// for its ACL revision before it answers a call under its own copy
	// of the tables (docs/SECURITY.md, "Revocation").
	PathACLRevision = "/v1/acl/revision" // GET -> ACLRevision
)

// ACLRevision answers GET /v1/acl/revision on the leader: the log index
// of the change that made its ACL tables, given once it has confirmed
// with a quorum that it leads. A node that has applied that index has
// every change the leader had acknowledged when it was asked.
type ACLRevision struct {
	Node     string `json:"node"`
	Revision uint64 `json:"revision"`
}

// HeaderAuthorization carries the bearer token: "Bearer <secret>".
const HeaderAuthorization = "Authorization"

// ACLSecret answers a bootstrap or a token create: the principal and its
// secret. The secret is shown this once; the cluster keeps only its hash.
// Secret is "" for a principal created without one (NoSecret).
type ACLSecret struct {
	Principal string   `json:"principal"`
	Policies  []string `json:"policies"`
	Secret    string   `json:"secret,omitempty"`
}

// WhoAmI names the caller's principal; Auth is false while the cluster
// has no ACLs (every caller may do everything, and Principal is "").
type WhoAmI struct {
	Auth      bool   `json:"auth"`
	Principal string `json:"principal"`
}

// ACLTokenRequest creates a principal with a new bearer token (or, with
// NoSecret, one reached only by a client certificate naming it). Replace
// allows an existing principal to be replaced: its old token stops
// working.
type ACLTokenRequest struct {
	Name     string   `json:"name"`
	Policies []string `json:"policies"`
	NoSecret bool     `json:"no_secret,omitempty"`
	Replace  bool     `json:"replace,omitempty"`
}

// ACLDeleteRequest names a principal or a policy to delete.
type ACLDeleteRequest struct {
	Name string `json:"name"`
}

// ACLDeleted answers a delete.
type ACLDeleted struct {
	Deleted string `json:"deleted"`
}

// ACLPrincipal is one principal as listed; secrets are never listed.
type ACLPrincipal struct {
	Name     string   `json:"name"`
	Policies []string `json:"policies"`
	HasToken bool     `json:"has_token"`
}

// ACLTokenList answers GET /v1/acl/tokens, by name.
type ACLTokenList struct {
	Principals []ACLPrincipal `json:"principals"`
}

// ACLRule allows (or with Deny denies) Verbs ("lock", "read", "admin") on
// the keys that start with Prefix.
type ACLRule struct {
	Prefix string   `json:"prefix"`
	Verbs  []string `json:"verbs"`
	Deny   bool     `json:"deny,omitempty"`
}

// ACLPolicy is a named set of rules; setting one replaces any of the same
// name.
type ACLPolicy struct {
	Name  string    `json:"name"`
	Rules []ACLRule `json:"rules"`
}

// ACLPolicyList answers GET /v1/acl/policies, by name.
type ACLPolicyList struct {
	Policies []ACLPolicy `json:"policies"`
}
