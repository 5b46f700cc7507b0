package fence

import (
	"errors"
	"fmt"
	"sync"
)

var (
	// ErrMissingToken: the request carried no fencing token.
	ErrMissingToken = errors.New("fence: missing fencing token")
	// ErrStaleToken: a newer token has already been honoured.
	ErrStaleToken = errors.New("fence: stale fencing token")
)

// StaleTokenError names the refused token and the highest one honoured. It
// matches ErrStaleToken with errors.Is.
type StaleTokenError struct {
	Resource string
	Token    uint64 // what the request carried
	Highest  uint64 // what the resource has already honoured
}

func (e *StaleTokenError) Error() string {
	return fmt.Sprintf("fence: stale fencing token %d for %q: token %d has already been honoured", e.Token, e.Resource, e.Highest)
}

func (e *StaleTokenError) Unwrap() error { return ErrStaleToken }

// Guard keeps, per resource, the highest fencing token it has honoured. The
// zero value is ready to use; a Guard must not be copied after first use.
//
// The Guard keeps its state in memory. A resource that outlives its process
// must persist the highest token together with its data (Restore seeds it at
// start-up), or a restart would let a stale holder back in.
type Guard struct {
	mu        sync.Mutex
	resources map[string]*resource
}

type resource struct {
	mu      sync.Mutex // held across the check and the effect
	highest uint64
}

// NewGuard returns an empty Guard.
func NewGuard() *Guard { return &Guard{} }

func (g *Guard) get(name string) *resource {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.resources == nil {
		g.resources = map[string]*resource{}
	}
	r := g.resources[name]
	if r == nil {
		r = &resource{}
		g.resources[name] = r
	}
	return r
}

// Do runs fn if token may act on resource, atomically with the check: no
// other Do on the same resource runs between the check and the end of fn.
// Token 0 means "no token" (fencelock never issues 0) and is refused with
// ErrMissingToken; a token below the highest honoured is refused with a
// *StaleTokenError. An accepted token becomes the highest honoured before fn
// runs, whether or not fn then succeeds: once a newer holder has shown up,
// older ones are stale even if that holder's write failed. Do returns fn's
// error.
func (g *Guard) Do(name string, token uint64, fn func() error) error {
	if token == 0 {
		return ErrMissingToken
	}
	r := g.get(name)
	r.mu.Lock()
	defer r.mu.Unlock()
	if token < r.highest {
		return &StaleTokenError{Resource: name, Token: token, Highest: r.highest}
	}
	r.highest = token
	if fn == nil {
		return nil
	}
	return fn()
}

// Highest is the highest token honoured on resource (0 if none).
func (g *Guard) Highest(name string) uint64 {
	r := g.get(name)
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.highest
}

// Restore raises resource's highest honoured token to at least token, for a
// resource reloading its persisted state. It never lowers it.
func (g *Guard) Restore(name string, token uint64) {
	r := g.get(name)
	r.mu.Lock()
	defer r.mu.Unlock()
	if token > r.highest {
		r.highest = token
	}
}
