// Package testports hands tests loopback addresses for the processes they
// start, safely: a port from net.Listen("127.0.0.1:0") that is closed
// again goes back to the kernel's ephemeral pool, which gives it to the
// next bind(0) or connect — another test's listener, a test binary of
// another package running alongside — before the child process binds it,
// and the child then fails with "address already in use", the more often
// the longer a loaded machine takes to start it (11 such calls in a row
// gave the same port twice in about 1 run in 115). These ports come from
// just below the ephemeral range, which the kernel hands to no bind(0) and
// no connect; each is checked free by binding it and given out once per
// test binary. It imports only the standard library, so the fault suite
// (internal/e2e), which drives the binary and nothing else of ours, can
// use it too.
package testports

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// span is how many ports below the ephemeral range are used.
const span = 10000

var ports struct {
	sync.Mutex
	lo, hi, next int // [lo, hi)
	given        map[int]bool
}

// Loopback returns a free 127.0.0.1:port that no other call in this test
// binary has returned.
func Loopback(tb testing.TB) string {
	tb.Helper()
	ports.Lock()
	defer ports.Unlock()
	if ports.given == nil {
		ports.given = map[int]bool{}
		ports.lo, ports.hi = belowEphemeral()
		if ports.hi > ports.lo {
			// Test binaries running at once (other packages, other
			// checkouts) start at different places in the range.
			ports.next = ports.lo + os.Getpid()%(ports.hi-ports.lo)
		}
	}
	for range ports.hi - ports.lo {
		p := ports.next
		if ports.next++; ports.next >= ports.hi {
			ports.next = ports.lo
		}
		if ports.given[p] {
			continue
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue // in use
		}
		ln.Close()
		ports.given[p] = true
		return ln.Addr().String()
	}
	// No room below the ephemeral range (an unusual ip_local_port_range):
	// ephemeral ports, still none twice.
	for {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		p := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if !ports.given[p] {
			ports.given[p] = true
			return ln.Addr().String()
		}
	}
}

// belowEphemeral is [lo, hi): span ports just under the first ephemeral
// port (Linux's ip_local_port_range; 32768 if it cannot be read), none
// under 1024.
func belowEphemeral() (lo, hi int) {
	hi = 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				hi = n
			}
		}
	}
	return max(1024, hi-span), max(1024, hi)
}
