package client

import (
	"context"
	"net/http"
	"strings"
	"sync"

	"github.com/fencelock/fencelock/api"
)

// Authentication and the ACL calls (docs/SECURITY.md, "Authentication
// and ACLs").

// authState is the client's credential and what it learnt of it.
type authState struct {
	token string

	mu        sync.Mutex
	principal string // from WhoAmI, once known
}

// WithAuthToken sends secret as "Authorization: Bearer <secret>" on every
// call, as a cluster with ACLs on requires (the CLI's --auth-token, or
// FENCELOCK_AUTH_TOKEN). The token travels in each HTTP request's
// Authorization header, and once at the start of each framed connection;
// reach the servers over https:// unless they are on loopback.
//
// With ACLs on, a principal may act only as holders named after it: its
// name, or its name followed by "/". A lease acquired without WithHolder
// gets the holder "<principal>/" + DefaultHolder() (the principal is
// asked of the server once, GET /v1/acl/whoami).
func WithAuthToken(secret string) Option {
	return func(c *Client) { c.auth.token = strings.TrimSpace(secret) }
}

// ownHolder prefixes a generated holder with the caller's principal when
// the client has a token and the cluster's ACLs are on.
func (c *Client) ownHolder(ctx context.Context, o *leaseOptions) error {
	if c.auth.token == "" || !o.generated {
		return nil
	}
	c.auth.mu.Lock()
	p := c.auth.principal
	c.auth.mu.Unlock()
	if p == "" {
		w, err := c.WhoAmI(ctx)
		if err != nil {
			return err
		}
		if !w.Auth || w.Principal == "" {
			return nil
		}
		p = w.Principal
		c.auth.mu.Lock()
		c.auth.principal = p
		c.auth.mu.Unlock()
	}
	if !strings.HasPrefix(o.holder, p+"/") {
		o.holder = p + "/" + o.holder
	}
	return nil
}

// WhoAmI names the principal the client's credential authenticates as
// (Auth false: the cluster has no ACLs).
func (c *Client) WhoAmI(ctx context.Context) (api.WhoAmI, error) {
	var out api.WhoAmI
	err := c.do(ctx, call{method: http.MethodGet, path: api.PathACLWhoAmI, out: &out})
	return out, err
}

// ACLBootstrap turns the cluster's ACLs on and answers the secret of the
// principal "admin" (every verb on every key). It works once per cluster:
// later calls fail with ErrPermissionDenied. Keep the secret: it is shown
// this once.
func (c *Client) ACLBootstrap(ctx context.Context) (api.ACLSecret, error) {
	var out api.ACLSecret
	err := c.do(ctx, call{method: http.MethodPost, path: api.PathACLBootstrap, body: struct{}{}, out: &out})
	return out, err
}

// ACLCreateToken creates a principal with the policies named and answers
// its new secret (admin).
func (c *Client) ACLCreateToken(ctx context.Context, req api.ACLTokenRequest) (api.ACLSecret, error) {
	var out api.ACLSecret
	err := c.do(ctx, call{method: http.MethodPost, path: api.PathACLTokenCreate, body: req, out: &out})
	return out, err
}

// ACLDeleteToken deletes a principal; its token stops working (admin).
func (c *Client) ACLDeleteToken(ctx context.Context, name string) error {
	return c.do(ctx, call{method: http.MethodPost, path: api.PathACLTokenDelete, body: api.ACLDeleteRequest{Name: name}, out: &api.ACLDeleted{}})
}

// ACLTokens lists the principals, never their secrets (admin).
func (c *Client) ACLTokens(ctx context.Context) (api.ACLTokenList, error) {
	var out api.ACLTokenList
	err := c.do(ctx, call{method: http.MethodGet, path: api.PathACLTokens, out: &out})
	return out, err
}

// ACLSetPolicy adds or replaces a policy (admin).
func (c *Client) ACLSetPolicy(ctx context.Context, p api.ACLPolicy) error {
	return c.do(ctx, call{method: http.MethodPost, path: api.PathACLPolicySet, body: p, out: &api.ACLPolicy{}})
}

// ACLDeletePolicy deletes a policy (admin).
func (c *Client) ACLDeletePolicy(ctx context.Context, name string) error {
	return c.do(ctx, call{method: http.MethodPost, path: api.PathACLPolicyDelete, body: api.ACLDeleteRequest{Name: name}, out: &api.ACLDeleted{}})
}

// ACLPolicies lists the policies (admin).
func (c *Client) ACLPolicies(ctx context.Context) (api.ACLPolicyList, error) {
	var out api.ACLPolicyList
	err := c.do(ctx, call{method: http.MethodGet, path: api.PathACLPolicies, out: &out})
	return out, err
}
