package main

import "context"

func init() {
	register(command{name: "lab", summary: "the fencing lab: step through lock calls (lab replay)", run: runLab})
}

func runLab(ctx context.Context, e *env, args []string) error {
	if len(args) > 0 && args[0] == "replay" {
		return runLabReplay(ctx, e, args[1:])
	}
	return usageError("lab: only 'lab replay' exists so far")
}
