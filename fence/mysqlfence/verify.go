package mysqlfence

import (
	"context"
	"errors"
	"fmt"

	"github.com/fencelock/fencelock/fence"
)

// Verified is a token the lock service has been asked about (or did not
// need to be: the current holder's), before any transaction took the
// fence row. Check, in the writing transaction, locks the row and makes
// sure the mark found there is one the answer covers. Fence.Verify and
// Fence.VerifyRead make one.
type Verified struct {
	table, resource string
	token           uint64
	write           bool
	verifying       bool
	seen            mark   // the mark the question was decided on
	key             string // the lock key to record with the mark
	asked           bool   // the lock service confirmed token for key
}

// Verify reads resource's mark (a plain autocommit read, outside any
// transaction), refuses a stale token at once, and asks the lock service
// about a token above the mark, bounded by the verify timeout, all before
// the caller begins the transaction in which Verified.Check takes the
// row. Without WithVerification it only reads the mark.
func (f *Fence) Verify(ctx context.Context, resource string, token uint64) (*Verified, error) {
	return f.prepare(ctx, resource, token, true)
}

// VerifyRead is Verify for a read of a read/write lock's reader.
func (f *Fence) VerifyRead(ctx context.Context, resource string, token uint64) (*Verified, error) {
	return f.prepare(ctx, resource, token, false)
}

func (f *Fence) prepare(ctx context.Context, resource string, token uint64, write bool) (*Verified, error) {
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
	p := &Verified{table: f.table, resource: resource, token: token, write: write, verifying: f.verify != nil, seen: m}
	if p.key, p.asked, err = f.verifyToken(ctx, resource, token, m); err != nil {
		return nil, err
	}
	return p, nil
}

// Check is the fence-table check of the verified token inside the
// caller's transaction tx (Check or CheckRead, as verified). Besides their
// refusals it returns ErrMarkMoved when the mark under the lock is not
// the one the lock service's answer was about (lowered, or bound to a key
// meanwhile): roll tx back, Verify again and retry.
func (p *Verified) Check(ctx context.Context, tx Querier) error {
	return check(ctx, tx, p.table, p.resource, p.token, p.write, p)
}

// covers says whether the answer holds for the mark m found under the
// row lock. A mark that rose (still not above the token) is covered: the
// token was confirmed as a live grant of the key.
func (p *Verified) covers(m mark) error {
	if !p.verifying {
		return nil
	}
	if m.bound != p.seen.bound || (!p.asked && mustAsk(p.token, m)) {
		return ErrMarkMoved
	}
	return nil
}

// mustAsk is fence.Verification.Check's rule: a token at or below a bound
// mark was verified when it raised it (a current holder's), any other is
// asked about.
func mustAsk(token uint64, m mark) bool { return !(token <= m.highest && m.bound != "") }

// verifyToken is this adapter's one call into fence's verification. Issue
// 43 moves these rules into package fence (a binding made by
// configuration, a question bounded in time and asked before the
// resource's lock); until it does they are kept here, around
// fence.Verification.Check as it is, so that adopting fence's version is
// a change to this function alone. It returns the key to record with the
// mark and whether the lock service was asked.
func (f *Fence) verifyToken(ctx context.Context, resource string, token uint64, m mark) (key string, asked bool, err error) {
	v := f.verify
	if v == nil || v.Verifier == nil {
		return "", false, nil
	}
	if m.bound == "" && !f.bindOnFirstUse && (v.Key == nil || v.Key(resource) == "") {
		return "", false, fmt.Errorf("%w %q: no lock key is configured for it (fence.Verification.Key), and binding it to the key its first request names was not asked for (WithBindOnFirstUse)", fence.ErrNoKey, resource)
	}
	if !mustAsk(token, m) {
		key, err = v.Check(ctx, resource, token, m.highest, m.bound) // asks nothing
		return key, false, err
	}
	timeout := f.verifyTimeout
	if timeout <= 0 {
		timeout = DefaultVerifyTimeout
	}
	vctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	key, err = v.Check(vctx, resource, token, m.highest, m.bound)
	switch {
	case err == nil || isRefusal(err):
	case ctx.Err() != nil:
		err = ctx.Err()
	case errors.Is(vctx.Err(), context.DeadlineExceeded):
		err = fmt.Errorf("%w (token %d for %q, asked for %v): %v", ErrVerifyTimeout, token, resource, timeout, err)
	}
	return key, true, err
}
