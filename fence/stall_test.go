package fence_test

import (
	"testing"

	"github.com/fencelock/fencelock/fence"
	"github.com/fencelock/fencelock/fence/fencetest"
)

// Finding 3 of issue 43 at the Guard: a new token's check was made under
// the resource's lock, so the current holder waited behind a stalled
// lock service. It is asked before the lock is taken.
func TestGuardNeverAsksUnderTheLock(t *testing.T) {
	fencetest.CheckStalledVerifier(t, func(t *testing.T, v *fence.Verification) fence.Fence {
		return fence.NewGuard(fence.WithVerification(v))
	})
}

// Finding 4 of issue 43: verify.go said every adapter verifies, and the
// RWGuard could not. It does, by the same two steps.
func TestRWGuardNeverAsksUnderTheLock(t *testing.T) {
	fencetest.CheckStalledVerifier(t, func(t *testing.T, v *fence.Verification) fence.Fence {
		return fence.NewRWGuard(fence.WithVerification(v))
	})
}
