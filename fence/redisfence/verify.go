package redisfence

import (
	"context"
	"fmt"

	"github.com/fencelock/fencelock/fence"
)

// verified is package fence's verification of a token, taken in Go on
// the mark read before the script (fence.Verification.Ask, then Confirm
// on that same mark), and what the script needs to check that the mark
// it finds is one on which Confirm decides the same.
type verified struct {
	pre   fence.Verified
	seen  mark   // the mark Ask and Confirm were given
	key   string // the key Confirm returned: recorded if the mark has none
	asked bool   // Ask asked the lock service (and it confirmed the token)
}

func (f *Fence) verifying() bool { return f.verify != nil && f.verify.Verifier != nil }

// ask is the steps before the script: the mark read, a stale token
// refused, the lock service asked when the token needs it, the answer
// confirmed on the mark read.
func (f *Fence) ask(ctx context.Context, resource string, token uint64, write bool) (*verified, error) {
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
	pre, err := f.verify.Ask(ctx, resource, token, m.highest, m.bound)
	if err != nil {
		return nil, err
	}
	key, err := f.verify.Confirm(ctx, resource, token, m.highest, m.bound, pre)
	if err != nil {
		return nil, err
	}
	return &verified{pre: pre, seen: m, key: key, asked: needsAsk(token, m)}, nil
}

// needsAsk is the rule of fence.Verification.Ask: the lock service is
// asked about a token above the mark, or at any mark that records no key;
// a token at or below a mark that records one (a current holder's, or a
// reader's) is not. Ask having answered without an error, it says
// whether the service confirmed the token. The script applies the same
// rule to the mark it finds.
func needsAsk(token uint64, m mark) bool { return token > m.highest || m.bound == "" }

// movedError: the script found a mark on which Confirm's decision might
// differ from the one made on the mark read before it.
type movedError struct{ found mark }

func (e *movedError) Error() string {
	return fmt.Sprintf("redisfence: the mark moved to %d (key %q) while the token was verified", e.found.highest, e.found.bound)
}

// moved is Confirm on the mark the script found: its refusal (another
// key bound the resource meanwhile), else fence.ErrReverify, so that the
// fence reads the mark and asks again.
func (f *Fence) moved(ctx context.Context, resource string, token uint64, pre *verified, found mark) error {
	if _, err := f.verify.Confirm(ctx, resource, token, found.highest, found.bound, pre.pre); err != nil {
		return err
	}
	return fmt.Errorf("%w: %q (mark %d, key %q) since it was read; ask again", fence.ErrReverify, resource, found.highest, found.bound)
}
