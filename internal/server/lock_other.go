//go:build !unix

package server

// lockDir is a no-op where flock is not available.
func lockDir(dir string) (unlock func() error, err error) {
	return func() error { return nil }, nil
}
