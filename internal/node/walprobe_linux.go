package node

import (
	"errors"
	"os"
	"syscall"
)

// reserveSpace allocates n bytes to f, as the log's segments are
// preallocated: it fails with ENOSPC when they would not fit.
func reserveSpace(f *os.File, n int64) error {
	err := syscall.Fallocate(int(f.Fd()), 0, 0, n)
	if errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, syscall.ENOSYS) {
		return nil
	}
	return err
}
