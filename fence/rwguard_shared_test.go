package fence_test

import (
	"testing"

	"github.com/fencelock/fencelock/fence"
	"github.com/fencelock/fencelock/fence/fencetest"
)

// The shared steps that every durable read/write fence is held to pass on
// the in-memory one.
func TestRWGuardSharedSteps(t *testing.T) {
	fencetest.CheckRW(t, fence.NewRWGuard(), nil)
}
