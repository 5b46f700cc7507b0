//go:build unix

package filefence

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

func lockDir(path string) (func() error, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("filefence: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s is locked by another process (one fence per directory)", ErrLocked, path)
		}
		return nil, fmt.Errorf("filefence: locking %s: %w", path, err)
	}
	return f.Close, nil
}
