package framing

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"
)

// Pool keeps one framed connection per server address (host:port) for
// callers that talk to a few servers from many goroutines. It dials on
// first use and again after a connection broke, and remembers a server
// that speaks only HTTP, so the caller can use HTTP for it from then on.
// The zero value is ready to use.
type Pool struct {
	// DialTimeout bounds one dial with its preface (default 2s).
	DialTimeout time.Duration
	// Dial, if set, makes the connection to addr (a TLS dial, say) that
	// the preface is then sent on; nil is a TCP dial.
	Dial func(ctx context.Context, addr string) (net.Conn, error)

	mu    sync.Mutex
	conns map[string]*Conn // nil value: that address speaks only HTTP
}

// Get returns the connection to addr, dialing one when there is none or
// the last one broke. It returns nil and no error for an address that
// answered the preface with HTTP.
func (p *Pool) Get(ctx context.Context, addr string) (*Conn, error) {
	p.mu.Lock()
	c, known := p.conns[addr]
	p.mu.Unlock()
	if known && (c == nil || c.Err() == nil) {
		return c, nil
	}
	timeout := p.DialTimeout
	if timeout <= 0 {
		timeout = 2 * time.Second
	}
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// Dial outside the lock: a dead server must not hold up calls to
	// the others.
	c, err := p.dial(dctx, addr)
	switch {
	case errors.Is(err, ErrNotFramed):
		c = nil
	case err != nil:
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if old, ok := p.conns[addr]; ok && old != nil && old.Err() == nil {
		// Another caller dialed first: share its connection.
		if c != nil {
			c.Close()
		}
		return old, nil
	}
	if p.conns == nil {
		p.conns = make(map[string]*Conn)
	}
	p.conns[addr] = c
	return c, nil
}

func (p *Pool) dial(ctx context.Context, addr string) (*Conn, error) {
	if p.Dial == nil {
		return Dial(ctx, addr)
	}
	c, err := p.Dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	return Start(ctx, c)
}

// Has reports whether the pool holds a framed connection to addr.
func (p *Pool) Has(addr string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.conns[addr] != nil
}

// Close closes every connection (calls waiting on them fail) and forgets
// every address. The Pool stays usable.
func (p *Pool) Close() {
	p.mu.Lock()
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	for _, c := range conns {
		if c != nil {
			c.Close()
		}
	}
}
