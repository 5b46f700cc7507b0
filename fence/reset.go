package fence

import (
	"errors"
	"fmt"
)

// ResetRequest is an operator's mending of one resource's mark (what
// `fencelock fence reset` asks of a fence): the mark set to To, and the
// last write's to To when it was above. Every token from To up is
// honoured again, so it is for mending a mark that a made-up or mistyped
// token raised. To 0 forgets the resource, its bound key included. A
// reset lowers only: a To above the mark refuses every write below it,
// the current holder's included (a poisoning, not a mend), and is done
// only with Raise. An adapter that records resets records User and Reason
// with it.
type ResetRequest struct {
	Resource string
	To       uint64
	Raise    bool
	User     string // who asked (the OS user)
	Reason   string // why
}

var (
	// ErrNoMark: a reset named a resource the fence has no mark for.
	ErrNoMark = errors.New("fence: no mark for the resource")
	// ErrResetRaises: a reset would raise a mark, and Raise was not set.
	ErrResetRaises = errors.New("fence: the reset would raise the mark")
)

// Check refuses a reset of a mark at highest that r may not make.
func (r ResetRequest) Check(highest uint64) error {
	if r.To > highest && !r.Raise {
		return fmt.Errorf("%w of %q from %d to %d: every write below %d would then be refused, the current holder's included (a poisoning, not a mend)", ErrResetRaises, r.Resource, highest, r.To, r.To)
	}
	return nil
}
