package main

import "context"

// runCompare points at the bench module, where compare moved so that the
// product binary carries none of the peers' clients (etcd, Redis,
// ZooKeeper).
func runCompare(context.Context, *env, []string) error {
	return movedError("compare moved to the bench module: cd bench && go run ./cmd/fencelock-bench compare ... (bench/README.md)")
}

// movedError is the usage error of a command or flag that moved out of
// this binary: its message says where, and so its hint cannot point at
// the command's help.
func movedError(msg string) error {
	return (&usageErr{message: msg, hint: "Run 'fencelock help' for the commands of this binary."}).exit()
}
