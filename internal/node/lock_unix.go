//go:build unix

package node

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lockDir takes an exclusive advisory lock on dir/LOCK. The kernel drops it
// when the process dies, so a kill -9 leaves no stale lock behind.
func lockDir(dir string) (unlock func() error, err error) {
	path := filepath.Join(dir, "LOCK")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("node: data directory %s is in use by another fencelock server", dir)
		}
		return nil, fmt.Errorf("node: locking %s: %w", path, err)
	}
	return f.Close, nil
}
