//go:build !simbugs

package auth

import "github.com/fencelock/fencelock/internal/acl"

// plantTokenCache is resolve's answer: only the simulation's build plants
// a bug here (plant_simbugs.go).
func (g *Guard) plantTokenCache(_ string, p acl.Principal, ok bool) (acl.Principal, bool) {
	return p, ok
}

// plantDecisionCache is Allowed's answer: only the simulation's build
// plants a bug here (plant_simbugs.go).
func plantDecisionCache(_ view, _ acl.Verb, _ string, allowed bool) bool { return allowed }
