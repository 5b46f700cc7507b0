package framing

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"
)

// Pool keeps framed connections per server address (host:port) for
// callers that talk to a few servers from many goroutines. It dials on
// first use and again after a connection broke, and remembers a server
// that speaks only HTTP, so the caller can use HTTP for it from then on.
// When every connection to a server has its window full (many waits out,
// say), it dials another, up to MaxConnsPerAddr. The zero value is ready
// to use.
type Pool struct {
	// DialTimeout bounds one dial with its preface (default 2s).
	DialTimeout time.Duration
	// MaxConnsPerAddr bounds the connections kept to one server (default
	// DefaultMaxConnsPerAddr).
	MaxConnsPerAddr int
	// Dial, if set, makes the connection to addr (a TLS dial, say) that
	// the preface is then sent on; nil is a TCP dial.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
	// Auth, if set, is sent on every new connection (Conn.Authorize)
	// before its first request.
	Auth string

	mu    sync.Mutex
	addrs map[string]*poolAddr
}

// DefaultMaxConnsPerAddr is Pool's default MaxConnsPerAddr.
const DefaultMaxConnsPerAddr = 4

type poolAddr struct {
	httpOnly bool
	conns    []*Conn
	dialing  chan struct{} // closed when the dial under way ends; nil when none is
}

// live drops broken connections and returns the others.
func (a *poolAddr) live() []*Conn {
	kept := a.conns[:0]
	for _, c := range a.conns {
		if c.Err() == nil {
			kept = append(kept, c)
		}
	}
	clear(a.conns[len(kept):])
	a.conns = kept
	return kept
}

// Get returns a connection to addr for most requests; see GetFor.
func (p *Pool) Get(ctx context.Context, addr string) (*Conn, error) {
	return p.GetFor(ctx, addr, "")
}

// GetFor returns a connection to addr with room for a request for target,
// dialing one when there is none, the last one broke, or all are full and
// there may be more. It returns nil and no error for an address that
// answered the preface with HTTP.
func (p *Pool) GetFor(ctx context.Context, addr, target string) (*Conn, error) {
	limit := p.MaxConnsPerAddr
	if limit <= 0 {
		limit = DefaultMaxConnsPerAddr
	}
	for {
		p.mu.Lock()
		if p.addrs == nil {
			p.addrs = make(map[string]*poolAddr)
		}
		a := p.addrs[addr]
		if a == nil {
			a = &poolAddr{}
			p.addrs[addr] = a
		}
		if a.httpOnly {
			p.mu.Unlock()
			return nil, nil
		}
		live := a.live()
		for _, c := range live {
			if c.Room(target) {
				p.mu.Unlock()
				return c, nil
			}
		}
		if a.dialing != nil {
			// Share the dial under way rather than start another.
			ch := a.dialing
			p.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		if len(live) >= limit {
			c := leastLoaded(live)
			p.mu.Unlock()
			return c, nil // its RoundTrip waits for room
		}
		done := make(chan struct{})
		a.dialing = done
		p.mu.Unlock()

		c, err := p.dial(ctx, addr)

		p.mu.Lock()
		a.dialing = nil
		close(done)
		if p.addrs[addr] != a {
			// Closed meanwhile: keep nothing.
			p.mu.Unlock()
			if c != nil {
				c.Close()
			}
			if err != nil {
				return nil, err
			}
			return nil, ErrConnClosed
		}
		live = a.live()
		switch {
		case err == nil:
			a.conns = append(a.conns, c)
			p.mu.Unlock()
			return c, nil
		case len(live) > 0:
			// An extra connection failed (refused at the server's
			// per-address cap, say): make do with those we have.
			c := leastLoaded(live)
			p.mu.Unlock()
			return c, nil
		case errors.Is(err, ErrNotFramed):
			a.httpOnly = true
			p.mu.Unlock()
			return nil, nil
		}
		p.mu.Unlock()
		return nil, err
	}
}

func (p *Pool) dial(ctx context.Context, addr string) (*Conn, error) {
	timeout := p.DialTimeout
	if timeout <= 0 {
		timeout = 2 * time.Second
	}
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var (
		fc  *Conn
		err error
	)
	if p.Dial == nil {
		fc, err = Dial(dctx, addr)
	} else {
		var c net.Conn
		if c, err = p.Dial(dctx, addr); err != nil {
			return nil, err
		}
		fc, err = Start(dctx, c)
	}
	if err == nil && p.Auth != "" {
		if err = fc.Authorize(p.Auth); err != nil {
			fc.Close()
		}
	}
	if err != nil {
		return nil, err
	}
	return fc, nil
}

func leastLoaded(conns []*Conn) *Conn {
	best := conns[0]
	for _, c := range conns[1:] {
		if c.load() < best.load() {
			best = c
		}
	}
	return best
}

// Has reports whether the pool holds a framed connection to addr.
func (p *Pool) Has(addr string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	a := p.addrs[addr]
	return a != nil && len(a.conns) > 0
}

// Conns is how many connections the pool holds to addr.
func (p *Pool) Conns(addr string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if a := p.addrs[addr]; a != nil {
		return len(a.live())
	}
	return 0
}

// Close closes every connection (calls waiting on them fail) and forgets
// every address. The Pool stays usable.
func (p *Pool) Close() {
	p.mu.Lock()
	addrs := p.addrs
	p.addrs = nil
	p.mu.Unlock()
	for _, a := range addrs {
		for _, c := range a.conns {
			c.Close()
		}
	}
}
