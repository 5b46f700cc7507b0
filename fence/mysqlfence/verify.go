package mysqlfence

import (
	"context"

	"github.com/fencelock/fencelock/fence"
)

// Verified is a token that has been through the first step of package
// fence's verification (fence.Verification.Ask) before any transaction
// took the fence row: its mark read without a lock, a stale token
// refused, the lock service asked when the token needed it. Check, in
// the writing transaction, takes the second step. Fence.Verify and
// Fence.VerifyRead make one; Fence.Do does both itself.
type Verified struct {
	table, resource string
	token           uint64
	write           bool
	v               *fence.Verification
	pre             fence.Verified
}

// Verify reads resource's mark with a plain autocommit SELECT (a
// consistent read, which waits for no row lock), refuses a stale token at
// once, and asks the lock service about the token when it needs asking
// (fence.Verification.Ask: bounded by Verification.Timeout, past which it
// is a *fence.UnavailableError), all before the caller begins the
// transaction in which Verified.Check takes the row. Without
// WithVerification it only reads the mark.
func (f *Fence) Verify(ctx context.Context, resource string, token uint64) (*Verified, error) {
	return f.ask(ctx, resource, token, true)
}

// VerifyRead is Verify for a read of a read/write lock's reader.
func (f *Fence) VerifyRead(ctx context.Context, resource string, token uint64) (*Verified, error) {
	return f.ask(ctx, resource, token, false)
}

func (f *Fence) ask(ctx context.Context, resource string, token uint64, write bool) (*Verified, error) {
	if err := checkToken(token); err != nil {
		return nil, err
	}
	m, err := readMark(ctx, f.db, markSQL(f.table), resource)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, checkError(f.table, resource, err)
	}
	if err := m.stale(resource, token, write); err != nil {
		return nil, err
	}
	pre, err := f.verify.Ask(ctx, resource, token, m.highest, m.bound)
	if err != nil {
		return nil, err
	}
	return &Verified{table: f.table, resource: resource, token: token, write: write, v: f.verify, pre: pre}, nil
}

// Check is the fence-table check of the verified token inside the
// caller's transaction tx (Check or CheckRead, as verified): it takes the
// fence row's lock, reads the mark again, refuses a stale token, and
// confirms that the answer still covers the mark
// (fence.Verification.Confirm, which never asks). Besides the refusals it
// returns fence.ErrReverify when the mark moved in a way the answer does
// not cover (a reset lowered it below a token nobody asked about): roll
// tx back, Verify again and retry (Fence.Do does this itself, up to
// fence.MaxReverify times).
func (p *Verified) Check(ctx context.Context, tx Querier) error {
	return check(ctx, tx, p.table, p.resource, p.token, p.write, p.v, p.pre)
}
