package server

import (
	"testing"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/locktable"
)

// The API's limits are the state machine's: a request the server accepts
// is one the table and the log can hold.
func TestAPILimitsAreTheTables(t *testing.T) {
	for _, c := range []struct {
		name     string
		api, own int
	}{
		{"MaxKeyLen", api.MaxKeyLen, locktable.MaxKeyLen},
		{"MaxHolderLen", api.MaxHolderLen, locktable.MaxHolderLen},
		{"MaxRequestIDLen", api.MaxRequestIDLen, fsm.MaxRequestIDLen},
		{"MaxBatch", api.MaxBatch, fsm.MaxBatch},
		{"MaxNodeIDLen", api.MaxNodeIDLen, fsm.MaxNodeIDLen},
		{"MaxAddrLen", api.MaxAddrLen, fsm.MaxAddrLen},
	} {
		if c.api != c.own {
			t.Errorf("api.%s = %d, but the state machine's is %d", c.name, c.api, c.own)
		}
	}
}
