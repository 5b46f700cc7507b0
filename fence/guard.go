package fence

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/fencelock/fencelock/fence/internal/ctxlock"
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
	verify    *Verification
}

type resource struct {
	// lock is held across the check and the effect; waiting for it
	// gives up when the caller's ctx is done.
	lock *ctxlock.Mutex
	// mu guards highest and key for a reader that must not wait for
	// lock (a verification's first step); they change holding both.
	mu      sync.Mutex
	highest uint64
	key     string // the lock key the resource is bound to
}

var _ Fence = (*Guard)(nil)

// GuardOption configures a Guard or an RWGuard.
type GuardOption func(*guardOptions)

type guardOptions struct {
	verify *Verification
}

// WithVerification makes the guard confirm every new token with the lock
// service before it raises a mark (Verification says how).
func WithVerification(v *Verification) GuardOption {
	return func(o *guardOptions) { o.verify = v }
}

// NewGuard returns an empty Guard.
func NewGuard(opts ...GuardOption) *Guard {
	var o guardOptions
	for _, opt := range opts {
		opt(&o)
	}
	return &Guard{verify: o.verify}
}

func (g *Guard) get(name string) *resource {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.resources == nil {
		g.resources = map[string]*resource{}
	}
	r := g.resources[name]
	if r == nil {
		r = &resource{lock: ctxlock.New()}
		g.resources[name] = r
	}
	return r
}

// Admit implements Fence in memory: token 0 is refused with
// ErrMissingToken, a token below the highest honoured with a
// *StaleTokenError; an accepted token becomes the highest honoured before
// effect runs, whether or not effect then succeeds (once a newer holder has
// shown up, older ones are stale even if that holder's write failed). With
// WithVerification, a token that would raise the mark is first confirmed
// with the lock service (before the resource is locked, so the current
// holder never waits for the service), and a refusal from it is returned. No
// other Admit on the same resource runs between the check and the end of
// effect. Admit returns effect's error, or ctx.Err() if ctx is done before
// the resource could be locked.
func (g *Guard) Admit(ctx context.Context, name string, token uint64, effect func(context.Context) error) error {
	if token == 0 {
		return ErrMissingToken
	}
	r := g.get(name)
	for attempt := 1; ; attempt++ {
		// The lock service is asked before the resource is locked: the
		// current holder never waits for it (Verification).
		var pre Verified
		if g.verify != nil {
			highest, bound := r.peek()
			if token < highest {
				return &StaleTokenError{Resource: name, Token: token, Highest: highest}
			}
			var err error
			if pre, err = g.verify.Ask(ctx, name, token, highest, bound); err != nil {
				return err
			}
		}
		if err := r.acquire(ctx); err != nil {
			return err
		}
		err, again := g.admitLocked(ctx, r, name, token, pre, effect)
		r.release()
		if !again || attempt == MaxReverify {
			return err
		}
	}
}

// admitLocked is Admit holding r: again when the verification must be
// asked again.
func (g *Guard) admitLocked(ctx context.Context, r *resource, name string, token uint64, pre Verified, effect func(context.Context) error) (err error, again bool) {
	if token < r.highest {
		return &StaleTokenError{Resource: name, Token: token, Highest: r.highest}, false
	}
	key, err := g.verify.Confirm(ctx, name, token, r.highest, r.key, pre)
	if err != nil {
		return err, errors.Is(err, ErrReverify)
	}
	r.mu.Lock()
	r.highest, r.key = token, key
	r.mu.Unlock()
	if effect == nil {
		return nil, false
	}
	return effect(ctx), false
}

// Do is Admit for an effect that needs no context: it runs fn if token may
// act on resource, atomically with the check, by the same rules.
func (g *Guard) Do(ctx context.Context, name string, token uint64, fn func() error) error {
	var effect func(context.Context) error
	if fn != nil {
		effect = func(context.Context) error { return fn() }
	}
	return g.Admit(ctx, name, token, effect)
}

func (r *resource) acquire(ctx context.Context) error {
	if ctx == nil {
		ctx = context.Background()
	}
	return r.lock.Lock(ctx)
}

func (r *resource) release() { r.lock.Unlock() }

// peek is r's mark without waiting for r's lock.
func (r *resource) peek() (uint64, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.highest, r.key
}

// Highest is the highest token honoured on resource (0 if none).
func (g *Guard) Highest(name string) uint64 {
	r := g.get(name)
	_ = r.acquire(context.Background())
	defer r.release()
	return r.highest
}

// Restore raises resource's highest honoured token to at least token, for a
// resource reloading its persisted state. It never lowers it.
func (g *Guard) Restore(name string, token uint64) {
	r := g.get(name)
	_ = r.acquire(context.Background())
	defer r.release()
	r.mu.Lock()
	defer r.mu.Unlock()
	if token > r.highest {
		r.highest = token
	}
}
