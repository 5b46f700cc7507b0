//go:build simbugs

package plant

import "sync/atomic"

var active atomic.Pointer[string]

// On says whether the planted bug name is active.
func On(name string) bool {
	p := active.Load()
	return p != nil && *p == name
}

// Set makes name the active planted bug ("": none).
func Set(name string) { active.Store(&name) }
