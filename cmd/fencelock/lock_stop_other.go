//go:build !linux

package main

import "os"

// watchStops reports nothing here: without waitid's WNOWAIT, lock cannot
// see CMD stop without also reaping it from under exec.Cmd.Wait. Here a
// stopped CMD keeps the lock until it continues and exits (the usage says
// stops are seen on Linux only).
func watchStops(int, <-chan struct{}) (<-chan os.Signal, <-chan struct{}) {
	done := make(chan struct{})
	close(done)
	return nil, done
}
