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

// plantAllowed is the planted bug acl-decision-cached's memory: the
// decisions that allowed a principal a verb on a key, never forgotten
// when a policy changes.
var plantAllowed sync.Map // plantDecision -> struct{}

type plantDecision struct {
	name string
	verb acl.Verb
	key  string
}

// plantDecisionCache is v.st.Allowed's answer allowed for (verb, key) as
// a guard with a cache of its decisions that a policy change does not
// clear gives it, under the planted bug acl-decision-cached.
func plantDecisionCache(v view, verb acl.Verb, key string, allowed bool) bool {
	if !plant.On("acl-decision-cached") {
		return allowed
	}
	d := plantDecision{v.p.Name, verb, key}
	if allowed {
		plantAllowed.Store(d, struct{}{})
		return true
	}
	_, seen := plantAllowed.Load(d)
	return seen
}
