package client

// LastErr exposes the last transient extension failure to tests, so they
// can wait for it as an event instead of sleeping.
func (l *Lease) LastErr() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastErr
}
