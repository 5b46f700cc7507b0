//go:build simbugs

package auth

import (
	"sync"

	"github.com/fencelock/fencelock/internal/acl"
	"github.com/fencelock/fencelock/internal/plant"
)

// plantSeen is the planted bug acl-deleted-token-cached's memory: the
// principals each guard resolved, by credential, never forgotten.
var plantSeen sync.Map // *Guard -> *sync.Map of credential -> acl.Principal

// plantTokenCache is resolve's answer (p, ok) for credential as a guard
// with a cache of resolved tokens that a deletion does not clear gives
// it, under the planted bug acl-deleted-token-cached.
func (g *Guard) plantTokenCache(credential string, p acl.Principal, ok bool) (acl.Principal, bool) {
	if !plant.On("acl-deleted-token-cached") || credential == "" {
		return p, ok
	}
	m, _ := plantSeen.LoadOrStore(g, &sync.Map{})
	seen := m.(*sync.Map)
	if ok {
		seen.Store(credential, p)
		return p, ok
	}
	if old, found := seen.Load(credential); found {
		return old.(acl.Principal), true
	}
	return p, ok
}
