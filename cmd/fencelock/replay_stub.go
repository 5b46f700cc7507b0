package main

import "context"

// runLabReplay is a placeholder for `fencelock lab replay`, which another
// change owns (replay.go). This file goes when that lands on main.
func runLabReplay(ctx context.Context, e *env, args []string) error {
	return usageError("lab replay is not built yet")
}
