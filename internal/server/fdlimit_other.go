//go:build !unix

package server

// RaiseFDLimit knows no file limit outside unix: it returns 0, and the
// connection cap must be given.
func RaiseFDLimit() (uint64, error) { return 0, nil }
