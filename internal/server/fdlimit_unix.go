//go:build unix

package server

import (
	"fmt"
	"syscall"
)

// RaiseFDLimit raises the process's soft limit on open files to its hard
// limit and returns the limit now in force. It is process-wide, so the
// server command calls it, not New.
func RaiseFDLimit() (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, fmt.Errorf("server: reading the open-file limit: %w", err)
	}
	if lim.Cur < lim.Max {
		raised := lim
		raised.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised); err != nil {
			return uint64(lim.Cur), fmt.Errorf("server: raising the open-file limit from %d to %d: %w", lim.Cur, lim.Max, err)
		}
		lim = raised
	}
	return uint64(lim.Cur), nil
}
