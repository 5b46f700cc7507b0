package testports

import (
	"net"
	"strconv"
	"testing"
)

func TestLoopbackHandsOutFreePortsBelowTheEphemeralRange(t *testing.T) {
	lo, hi := belowEphemeral()
	seen := map[string]bool{}
	for range 50 {
		a := Loopback(t)
		if seen[a] {
			t.Fatalf("%s handed out twice", a)
		}
		seen[a] = true
		_, ps, err := net.SplitHostPort(a)
		if err != nil {
			t.Fatal(err)
		}
		p, _ := strconv.Atoi(ps)
		if hi > lo && (p < lo || p >= hi) {
			t.Fatalf("port %d outside [%d, %d)", p, lo, hi)
		}
		ln, err := net.Listen("tcp", a)
		if err != nil {
			t.Fatalf("%s is not free: %v", a, err)
		}
		ln.Close()
	}
}

// A port someone holds is skipped.
func TestLoopbackSkipsAPortInUse(t *testing.T) {
	Loopback(t) // the range is set up
	ports.Lock()
	next := ports.next
	ports.Unlock()
	held, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(next))
	if err != nil {
		t.Skipf("port %d is in use already: %v", next, err)
	}
	defer held.Close()
	if a := Loopback(t); a == held.Addr().String() {
		t.Fatalf("handed out %s, which is held", a)
	}
}
