package pgfence_test

import (
	"testing"

	"github.com/fencelock/fencelock/fence"
	"github.com/fencelock/fencelock/fence/fencetest"
	"github.com/fencelock/fencelock/fence/pgfence"
)

// Finding 3 of issue 43 in PostgreSQL: a new token's check was made while
// its transaction held the fence row's lock (SELECT ... FOR UPDATE), so
// the current holder's transactions waited behind a stalled lock
// service. The check is made before the row is locked.
func TestPGFenceNeverAsksUnderTheRowLock(t *testing.T) {
	fencetest.CheckStalledVerifier(t, func(t *testing.T, v *fence.Verification) fence.Fence {
		return pgfence.New(newPool(t), pgfence.WithVerification(v))
	})
}
