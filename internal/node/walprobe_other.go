//go:build !linux

package node

import "os"

// reserveSpace cannot check for space here; the reopen will tell.
func reserveSpace(f *os.File, n int64) error { return nil }
