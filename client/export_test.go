package client

import "strings"

// LastErr exposes the last transient extension failure to tests, so they
// can wait for it as an event instead of sleeping.
func (l *Lease) LastErr() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastErr
}

// Framed reports whether the client holds a framed connection to addr (a
// base URL), so tests can tell frames from the HTTP fallback.
func (c *Client) Framed(addr string) bool {
	return c.frames.Has(strings.TrimPrefix(addr, "http://"))
}
