package filefence

import (
	"testing"

	"github.com/fencelock/fencelock/fence"
	"github.com/fencelock/fencelock/fence/fencetest"
)

// Finding 3 of issue 43 at the file fence (and so the proxy): the current
// holder waited behind a new token's stalled check, made under the
// resource's lock.
func TestFileFenceNeverAsksUnderTheLock(t *testing.T) {
	fencetest.CheckStalledVerifier(t, func(t *testing.T, v *fence.Verification) fence.Fence {
		f, err := Open(t.TempDir(), WithVerification(v))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	})
}
