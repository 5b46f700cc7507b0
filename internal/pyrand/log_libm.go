//go:build pyrand_libm

package pyrand

/*
#cgo LDFLAGS: -lm
#include <math.h>
*/
import "C"

// logExact: with -tags pyrand_libm the log is the C library's own, so
// Expovariate matches CPython on the same machine bit for bit.
const logExact = true

func log(x float64) float64 { return float64(C.log(C.double(x))) }
