package fence

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"sync"
)

// RWFence is the resource side of a fencelock read/write lock: reads are
// admitted under readers' (or the writer's) tokens, writes under the
// writer's. Every grant of a read/write lock takes a new token from the one
// counter, and the lock never grants a writer beside another holder, so at
// the resource:
//
//   - a write is admitted iff its token is >= every token the resource has
//     admitted, reads included (the exclusive rule of Fence over reads and
//     writes). It then becomes the last writer's token. A writer that lost
//     its lock is refused once a reader or writer granted after it has been
//     admitted;
//   - a read is admitted iff its token is >= the last writer's token
//     admitted. Readers do not order each other (they hold together), so a
//     reader granted before another may still read after it; but a reader
//     that lost its lock is refused once a writer granted after it has
//     written. An admitted read raises the mark writes are checked against.
//
// Token 0 is refused (ErrMissingToken) and a stale token with a
// *StaleTokenError whose Highest is the token that made it stale, as in
// Fence. The check, the raised mark and the effect are atomic with respect
// to every write on the same resource (reads may run together).
type RWFence interface {
	AdmitRead(ctx context.Context, resource string, token uint64, effect func(ctx context.Context) error) error
	AdmitWrite(ctx context.Context, resource string, token uint64, effect func(ctx context.Context) error) error
}

// RWGuard is RWFence in memory: per resource, the last writer's token and
// the highest token admitted. The zero value is ready to use; an RWGuard
// must not be copied after first use. Reads of one resource run together,
// a write runs alone, and a write that waits holds back reads that arrive
// after it. It is also a Fence whose every Admit is a write.
//
// Like Guard it keeps its marks in memory: a resource that outlives its
// process persists both marks with its data and seeds them with Restore.
type RWGuard struct {
	mu        sync.Mutex
	resources map[string]*rwResource
	verify    *Verification
}

var (
	_ RWFence = (*RWGuard)(nil)
	_ Fence   = (*RWGuard)(nil)
)

// NewRWGuard returns an empty RWGuard. WithVerification makes it confirm
// every new token with the lock service, reads' and writes' alike, before
// it takes the resource (Verification).
func NewRWGuard(opts ...GuardOption) *RWGuard {
	var o guardOptions
	for _, opt := range opts {
		opt(&o)
	}
	return &RWGuard{verify: o.verify}
}

type rwResource struct {
	mu        sync.Mutex
	readers   int
	writer    bool
	waiting   int           // writers waiting: readers arriving now wait behind them
	changed   chan struct{} // closed, and replaced, whenever the holds change
	lastWrite uint64        // the last admitted write's token
	highest   uint64        // the highest token admitted, read or write
	key       string        // the lock key the resource is bound to (verifying)
}

func (g *RWGuard) get(name string) *rwResource {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.resources == nil {
		g.resources = map[string]*rwResource{}
	}
	r := g.resources[name]
	if r == nil {
		r = &rwResource{changed: make(chan struct{})}
		g.resources[name] = r
	}
	return r
}

// AdmitRead admits a read under token: token >= the last admitted write's
// token. An admitted token raises the mark writes are checked against, then
// effect runs, alongside other reads but never alongside a write.
func (g *RWGuard) AdmitRead(ctx context.Context, name string, token uint64, effect func(context.Context) error) error {
	return g.admit(ctx, name, token, false, effect)
}

// AdmitWrite admits a write under token: token >= every token admitted on
// the resource. The token becomes the last write's, then effect runs alone.
func (g *RWGuard) AdmitWrite(ctx context.Context, name string, token uint64, effect func(context.Context) error) error {
	return g.admit(ctx, name, token, true, effect)
}

// Admit is AdmitWrite: a caller that knows nothing of reads gets the rule
// of Fence.
func (g *RWGuard) Admit(ctx context.Context, name string, token uint64, effect func(context.Context) error) error {
	return g.AdmitWrite(ctx, name, token, effect)
}

func (g *RWGuard) admit(ctx context.Context, name string, token uint64, write bool, effect func(context.Context) error) error {
	if token == 0 {
		return ErrMissingToken
	}
	if ctx == nil {
		ctx = context.Background()
	}
	r := g.get(name)
	for attempt := 1; ; attempt++ {
		// The lock service is asked before the holds are taken: holders
		// never wait for it (Verification).
		var pre Verified
		if g.verify != nil {
			r.mu.Lock()
			err := r.staleLocked(name, token, write)
			highest, bound := r.highest, r.key
			r.mu.Unlock()
			if err != nil {
				return err
			}
			if pre, err = g.verify.Ask(ctx, name, token, highest, bound); err != nil {
				return err
			}
		}
		if err := r.lock(ctx, write); err != nil {
			return err
		}
		r.mu.Lock()
		err := r.staleLocked(name, token, write)
		var key string
		if err == nil {
			key, err = g.verify.Confirm(ctx, name, token, r.highest, r.key, pre)
		}
		if err == nil {
			if write {
				r.lastWrite = token
			}
			r.highest = max(r.highest, token)
			r.key = key
		}
		r.mu.Unlock()
		if errors.Is(err, ErrReverify) && attempt < MaxReverify {
			r.unlock(write)
			continue
		}
		if err != nil || effect == nil {
			r.unlock(write)
			return err
		}
		defer r.unlock(write)
		return effect(ctx)
	}
}

// staleLocked refuses a token below the mark its kind is checked
// against; r.mu is held.
func (r *rwResource) staleLocked(name string, token uint64, write bool) error {
	switch {
	case write && token < r.highest:
		return &StaleTokenError{Resource: name, Token: token, Highest: r.highest}
	case !write && token < r.lastWrite:
		return &StaleTokenError{Resource: name, Token: token, Highest: r.lastWrite}
	}
	return nil
}

// lock takes a read or the write hold of r, FIFO enough that a waiting
// writer is not starved: a reader does not start while a writer waits.
func (r *rwResource) lock(ctx context.Context, write bool) error {
	counted := false
	for {
		r.mu.Lock()
		free := !r.writer && r.readers == 0
		if (write && free) || (!write && !r.writer && r.waiting == 0) {
			if write {
				r.writer = true
				if counted {
					r.waiting--
				}
			} else {
				r.readers++
			}
			r.mu.Unlock()
			return nil
		}
		if write && !counted {
			r.waiting++
			counted = true
			r.wakeLocked() // a change of the holds' state: watchers re-check
		}
		ch := r.changed
		r.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			if counted {
				r.mu.Lock()
				r.waiting--
				r.wakeLocked()
				r.mu.Unlock()
			}
			return ctx.Err()
		}
	}
}

func (r *rwResource) unlock(write bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if write {
		r.writer = false
	} else {
		r.readers--
	}
	r.wakeLocked()
}

func (r *rwResource) wakeLocked() {
	close(r.changed)
	r.changed = make(chan struct{})
}

// Marks returns resource's last admitted write token and its highest
// admitted token (0, 0 if none).
func (g *RWGuard) Marks(name string) (lastWrite, highest uint64) {
	r := g.get(name)
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastWrite, r.highest
}

// Restore raises resource's marks to at least lastWrite and highest, for a
// resource reloading its persisted state. It never lowers them.
func (g *RWGuard) Restore(name string, lastWrite, highest uint64) {
	r := g.get(name)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lastWrite = max(r.lastWrite, lastWrite)
	r.highest = max(r.highest, highest, lastWrite)
}

// RWMiddleware is Middleware over a read/write fence: a request whose
// method is in reads (GET and HEAD when none are given) is admitted by
// AdmitRead, any other by AdmitWrite, with Middleware's token header,
// resource names and answers. A reader of a fencelock read/write lock
// sends its read hold's token, a writer its write hold's.
func RWMiddleware(f RWFence, resource ResourceFunc, next http.Handler, reads ...string) http.Handler {
	if len(reads) == 0 {
		reads = []string{http.MethodGet, http.MethodHead}
	}
	read := Middleware(readFence{f}, resource, next)
	write := Middleware(writeFence{f}, resource, next)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if slices.Contains(reads, r.Method) {
			read.ServeHTTP(w, r)
			return
		}
		write.ServeHTTP(w, r)
	})
}

type readFence struct{ f RWFence }

func (r readFence) Admit(ctx context.Context, name string, token uint64, effect func(context.Context) error) error {
	return r.f.AdmitRead(ctx, name, token, effect)
}

type writeFence struct{ f RWFence }

func (w writeFence) Admit(ctx context.Context, name string, token uint64, effect func(context.Context) error) error {
	return w.f.AdmitWrite(ctx, name, token, effect)
}
