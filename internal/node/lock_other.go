//go:build !unix

package node

// lockDir is a no-op where flock is not available.
func lockDir(dir string) (unlock func() error, err error) {
	return func() error { return nil }, nil
}
