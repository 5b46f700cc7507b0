package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/fence"
)

// Verifier is a fence.Verifier backed by the cluster: a fence that uses
// it (fence.Verification) honours a new token only once the cluster has
// confirmed, with one linearizable check, that it is a live grant of the
// lock key guarding the resource. A made-up token (2^64-1, or a test's
// 999) or another key's live token then cannot raise a resource's mark.
type Verifier struct {
	c *Client
}

var _ fence.Verifier = (*Verifier)(nil)

// NewVerifier returns a Verifier that asks the cluster c talks to. With
// ACLs on, c's principal needs read on the keys it verifies.
func NewVerifier(c *Client) *Verifier { return &Verifier{c: c} }

// Verify is nil if token is key's live grant. If it is not, the answer is
// a *fence.UnverifiedTokenError that says, when one more read can tell,
// the highest token the cluster has issued (a token above it was never
// issued) and key's live token. An error reaching the cluster is returned
// as it is: the token is neither honoured nor judged.
func (v *Verifier) Verify(ctx context.Context, key string, token uint64) error {
	ok, err := v.c.Check(ctx, key, token)
	if err != nil {
		return fmt.Errorf("fencelock: verifying token %d of %q: %w", token, key, err)
	}
	if ok {
		return nil
	}
	e := &fence.UnverifiedTokenError{Key: key, Token: token}
	// Only a refusal pays for this second read; it makes the error say
	// which kind of wrong the token is.
	q := url.Values{api.QueryPrefix: {key}, api.QueryLimit: {"1"}}
	var ov api.Overview
	if err := v.c.do(ctx, call{method: http.MethodGet, path: api.PathOverview, query: q, out: &ov}); err == nil {
		e.Issued = ov.LastToken
		if len(ov.Locks) > 0 && ov.Locks[0].Key == key && len(ov.Locks[0].Holders) == 0 {
			e.Current = ov.Locks[0].Token
		}
	}
	return e
}
