package fsm_test

import (
	"math"
	"testing"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/locktable"
)

// The wire contract states the limits the core enforces; the two must not
// drift.
func TestWireLimitsAreTheCoreLimits(t *testing.T) {
	for _, c := range []struct {
		name      string
		api, core int
	}{
		{"MaxKeyLen", api.MaxKeyLen, locktable.MaxKeyLen},
		{"MaxHolderLen", api.MaxHolderLen, locktable.MaxHolderLen},
		{"MaxRequestIDLen", api.MaxRequestIDLen, fsm.MaxRequestIDLen},
		{"MaxBatch", api.MaxBatch, fsm.MaxBatch},
		{"MaxNodeIDLen", api.MaxNodeIDLen, fsm.MaxNodeIDLen},
		{"MaxAddrLen", api.MaxAddrLen, fsm.MaxAddrLen},
	} {
		if c.api != c.core {
			t.Errorf("api.%s = %d, the core's is %d", c.name, c.api, c.core)
		}
	}
}

// The clock's bounds leave room for the longest lease and wait, and let a
// stamp advance at least as far as the longest lease.
func TestClockBoundsFitTheWireLimits(t *testing.T) {
	if fsm.MaxClockStep < locktable.Duration(api.MaxTTL) {
		t.Errorf("MaxClockStep %v is shorter than api.MaxTTL %v", fsm.MaxClockStep, api.MaxTTL)
	}
	if headroom := locktable.Time(math.MaxInt64) - fsm.MaxClockTime; headroom < locktable.Time(api.MaxTTL+api.MaxWait) {
		t.Errorf("MaxClockTime leaves %d ns before the int64 limit", headroom)
	}
}
