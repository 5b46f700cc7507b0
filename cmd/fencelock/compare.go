package main

import "context"

func init() {
	register(command{name: "compare", hidden: true, run: runCompare})
}

// runCompare points at the bench module, where compare moved so that the
// product binary carries none of the peers' clients (etcd, Redis,
// ZooKeeper).
func runCompare(context.Context, *env, []string) error {
	return usageError("compare moved to the bench module: cd bench && go run ./cmd/fencelock-bench compare ... (bench/README.md)")
}
