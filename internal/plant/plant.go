//go:build !simbugs

// Package plant is the seam through which the deterministic simulation
// (internal/sim) plants bugs in the product, to show that its checks
// catch them: a planted bug is a branch of the product's code guarded by
// On(name). In every build but the simulation's own (go test -tags
// simbugs ./internal/sim), On is false for every name and the compiler
// drops the branches: no planted bug is ever shipped.
package plant

// On says whether the planted bug name is active: never, in this build.
func On(string) bool { return false }
