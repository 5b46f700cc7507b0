package redisfence_test

import (
	"context"
	"testing"

	"github.com/fencelock/fencelock/fence"
	"github.com/fencelock/fencelock/fence/fencetest"
	"github.com/fencelock/fencelock/fence/redisfence"
)

// admitter is the fence as a fence.Fence for fencetest, as rw is a
// fence.RWFence: a write with no ops checks and raises the mark alone,
// and the effect runs after the script. (redisfence is not a fence.Fence:
// a Go effect cannot run inside the script.)
type admitter struct{ f *redisfence.Fence }

func (a admitter) Admit(ctx context.Context, resource string, token uint64, effect func(context.Context) error) error {
	if _, err := a.f.Write(ctx, resource, token); err != nil {
		return err
	}
	return effect(ctx)
}

// Finding 3 of issue 43 in Redis, held to the test every adapter passes:
// the lock service stalled on a newcomer's token holds up neither the
// current holder of that resource nor of another. (The test's resources
// get marks of this test's own.)
func TestRedisFenceNeverAsksBeforeItsScript(t *testing.T) {
	fencetest.CheckStalledVerifier(t, func(t *testing.T, v *fence.Verification) fence.Fence {
		c, _, name := newFence(t)
		for _, r := range []string{"r", "other"} {
			if _, err := c.Do(ctx, "DEL", "fencelock:mark:{"+name+":"+r+"}"); err != nil {
				t.Fatal(err)
			}
		}
		return admitter{redisfence.New(c, redisfence.WithVerification(v),
			redisfence.WithMarkKey(func(r string) string { return "fencelock:mark:{" + name + ":" + r + "}" }))}
	})
}
