package fsm

import (
	"errors"
	"fmt"
	"math"

	"github.com/fencelock/fencelock/internal/locktable"
)

// The cluster time a command carries is validated by every node as it
// applies the command, so a leader's stamp can only advance within a
// bound of the time applied before it. A command beyond is refused with
// ErrClockStep and changes nothing, on every node alike.
//
// Legitimate stamps advance by the leader's elapsed time since the last
// entry: while anything is held or queued the leader records cluster time
// at least every ClockCheckpoint (a second by default), and a new leader
// resumes from the last applied time, so downtime adds nothing. With
// nothing held no entry need be written for a long time, so an empty table
// takes a much larger step. A leader whose stamp is refused resumes its
// clock from the applied time (the server does) and loses only the time
// it could not account for, as after a failover.
const (
	// MaxClockTime is the latest cluster time a command may carry: half
	// the int64 range (about 146 years of cluster time), so that any
	// time plus any ttl or wait fits.
	MaxClockTime = locktable.Time(math.MaxInt64 / 2)
	// MaxClockStep is how far a stamp may advance past the applied time
	// while the table holds a lease record or a waiter: a day, the
	// longest lease.
	MaxClockStep = 24 * 3600 * locktable.Second
	// MaxIdleClockStep is the step allowed when the table is empty, so
	// there is no lease for a jump to expire: a year of idle leader.
	MaxIdleClockStep = 366 * 24 * 3600 * locktable.Second
)

// ErrClockStep: a command's cluster time is beyond the bounds above.
var ErrClockStep = errors.New("fsm: cluster time out of bounds")

// checkStamp refuses a stamp beyond the bounds. A stamp at or behind the
// applied time is always taken (as the applied time).
func (f *FSM) checkStamp(now locktable.Time) error {
	if now <= f.now {
		return nil
	}
	if now > MaxClockTime {
		return fmt.Errorf("%w: %d is past the latest cluster time %d", ErrClockStep, now, MaxClockTime)
	}
	step := MaxClockStep
	if f.table.Len() == 0 {
		step = MaxIdleClockStep
	}
	// f.now < now <= MaxClockTime here, so the sum cannot overflow.
	if now > f.now+locktable.Time(step) {
		return fmt.Errorf("%w: %d is more than %d ns after the applied time %d", ErrClockStep, now, step, f.now)
	}
	return nil
}
