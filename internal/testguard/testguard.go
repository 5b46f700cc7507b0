// Package testguard keeps test binaries away from servers they did not
// start. A test binary's TestMain points every default address (the
// client's 127.0.0.1:7470, FENCELOCK_ADDR, the peers' default ports) at a
// Tripwire: a loopback listener of its own that records every connection
// and answers none. A test that falls back to a default then reaches the
// tripwire instead of a user's dev server, and Main fails the binary,
// naming what connected.
//
// Only tests import this package.
package testguard

import (
	"fmt"
	"net"
	"os"
	"sync"
	"time"
)

// Tripwire is a loopback listener that counts connections and closes each
// at once.
type Tripwire struct {
	ln   net.Listener
	done chan struct{}

	mu   sync.Mutex
	hits []string // remote addresses, in arrival order
}

// NewTripwire listens on a free 127.0.0.1 port.
func NewTripwire() (*Tripwire, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("testguard: %w", err)
	}
	t := &Tripwire{ln: ln, done: make(chan struct{})}
	go t.accept()
	return t, nil
}

func (t *Tripwire) accept() {
	defer close(t.done)
	for {
		c, err := t.ln.Accept()
		if err != nil {
			return
		}
		t.mu.Lock()
		t.hits = append(t.hits, c.RemoteAddr().String())
		t.mu.Unlock()
		c.Close()
	}
}

// Addr is the tripwire's host:port.
func (t *Tripwire) Addr() string { return t.ln.Addr().String() }

// Take returns the connections seen so far and forgets them (a test that
// checks the guard itself takes its own hit).
func (t *Tripwire) Take() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	h := t.hits
	t.hits = nil
	return h
}

// Close stops listening and returns the connections not taken. It first
// connects to itself and waits, bounded, until that connection is
// accepted, so that a connection still in the listen backlog is counted.
func (t *Tripwire) Close() []string {
	if c, err := net.Dial("tcp", t.Addr()); err == nil {
		self := c.LocalAddr().String()
		c.Close()
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			if t.forget(self) {
				break
			}
		}
	}
	t.ln.Close()
	<-t.done
	return t.Take()
}

// forget removes addr from the hits and says whether it was there.
func (t *Tripwire) forget(addr string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, h := range t.hits {
		if h == addr {
			t.hits = append(t.hits[:i], t.hits[i+1:]...)
			return true
		}
	}
	return false
}

// Env lists the environment variables through which a test, or a binary
// it starts, could find a server: Wrap points them at the tripwire.
var Env = []string{"FENCELOCK_ADDR", "FENCELOCK_LISTEN"}

// M is what a TestMain runs: *testing.M, or a Wrap of it (goleak's
// VerifyTestMain takes either).
type M interface{ Run() int }

// Wrap returns m guarded by a new tripwire. Its Run sets the variables of
// Env to the tripwire's address, calls redirect (to point package defaults
// at it), runs the tests, closes the tripwire and turns a pass into a
// failure when anything connected to it. A tripwire that cannot listen
// fails the run.
func Wrap(m M, redirect func(*Tripwire)) M { return guarded{m, redirect} }

type guarded struct {
	m        M
	redirect func(*Tripwire)
}

func (g guarded) Run() int {
	t, err := NewTripwire()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for _, k := range Env {
		os.Setenv(k, t.Addr())
	}
	if g.redirect != nil {
		g.redirect(t)
	}
	code := g.m.Run()
	if hits := t.Close(); len(hits) > 0 {
		fmt.Fprintf(os.Stderr, "testguard: %d connection(s) from %v reached the tripwire %s that stands in for the default addresses: a test used a server it did not start\n",
			len(hits), hits, t.Addr())
		if code == 0 {
			code = 1
		}
	}
	return code
}
