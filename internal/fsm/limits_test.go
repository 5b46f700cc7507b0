package fsm_test

import (
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
