package redisfence

import (
	"context"
	"errors"
	"fmt"

	"github.com/fencelock/fencelock/fence"
)

// verified is the lock service's answer about a token, and the mark it
// was given for; the script checks the mark is still one it covers.
type verified struct {
	seen  mark
	key   string // the lock key to record with the mark
	asked bool   // the lock service confirmed token for key
}

func (f *Fence) prepare(ctx context.Context, resource string, token uint64, write bool) (*verified, error) {
	m, err := f.readMark(ctx, resource)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	if err := m.stale(resource, token, write); err != nil {
		return nil, err
	}
	p := &verified{seen: m}
	if p.key, p.asked, err = f.verifyToken(ctx, resource, token, m); err != nil {
		return nil, err
	}
	return p, nil
}

// mustAsk is fence.Verification.Check's rule: a token at or below a bound
// mark was verified when it raised it (a current holder's), any other is
// asked about. The script applies the same rule to the mark it finds.
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

func isRefusal(err error) bool {
	return errors.Is(err, fence.ErrStaleToken) || errors.Is(err, fence.ErrUnverifiedToken) ||
		errors.Is(err, fence.ErrWrongKey) || errors.Is(err, fence.ErrNoKey)
}
