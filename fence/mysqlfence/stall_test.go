package mysqlfence_test

import (
	"testing"

	"github.com/fencelock/fencelock/fence"
	"github.com/fencelock/fencelock/fence/fencetest"
	"github.com/fencelock/fencelock/fence/mysqlfence"
)

// Finding 3 of issue 43 in MySQL/MariaDB, held to the test every adapter
// passes: the lock service stalled on a newcomer's token holds up neither
// the current holder of that resource nor of another.
func TestMySQLFenceNeverAsksUnderTheRowLock(t *testing.T) {
	fencetest.CheckStalledVerifier(t, func(t *testing.T, v *fence.Verification) fence.Fence {
		return mysqlfence.New(newDB(t), mysqlfence.WithVerification(v))
	})
}
