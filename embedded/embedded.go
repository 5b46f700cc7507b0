// Package embedded is fencelock's lock table inside one process: leases
// with fencing tokens for goroutines or components that share an address
// space, with an injectable clock so that tests can drive time.
//
// It is the same core the server replicates, behind a mutex, reading time
// from a clock you choose. Release follows the safe rule: only the live
// holder releases, so a holder whose lease expired and was taken over can
// never free the new holder's lock.
//
//	m := embedded.New()
//	tok, ok, err := m.Acquire("reports", "worker-1", 30*time.Second)
//	if err != nil || !ok { ... }
//	// pass tok to the resource; it rejects anything older
//	m.Release("reports", "worker-1")
package embedded

import (
	"errors"
	"sync"
	"time"

	"github.com/fencelock/fencelock/internal/locktable"
)

// Clock returns the current time. Only differences between readings
// matter; the Manager never goes backwards even if the clock does.
type Clock func() time.Time

// Errors for bad arguments; they match with errors.Is.
var (
	ErrInvalidKey    = locktable.ErrInvalidKey
	ErrInvalidHolder = locktable.ErrInvalidHolder
	ErrInvalidTTL    = locktable.ErrInvalidTTL
	// ErrNotHeld: Extend by someone who is not the live holder of that token.
	ErrNotHeld = locktable.ErrNotHeld
)

// Manager is an in-process lock table. It is safe for concurrent use.
type Manager struct {
	mu    sync.Mutex
	table *locktable.Table
	clock Clock
	epoch time.Time
	last  locktable.Time
}

// Option configures a Manager.
type Option func(*Manager)

// WithClock makes the Manager read time from c instead of time.Now.
func WithClock(c Clock) Option { return func(m *Manager) { m.clock = c } }

// New returns an empty Manager; its first grant carries token 1.
func New(opts ...Option) *Manager {
	m := &Manager{table: locktable.New(), clock: time.Now}
	for _, o := range opts {
		o(m)
	}
	m.epoch = m.clock()
	return m
}

// now is the time since the Manager was made, never decreasing. Called
// with mu held.
func (m *Manager) now() locktable.Time {
	t := locktable.Time(m.clock().Sub(m.epoch))
	if t > m.last {
		m.last = t
	}
	return m.last
}

// Acquire takes name for holder for ttl. It grants when name is free, its
// lease has expired, or holder already holds it (a renewal: a new token
// that supersedes the old one). ok is false when another holder's lease is
// alive; err is only for bad arguments.
func (m *Manager) Acquire(name, holder string, ttl time.Duration) (token uint64, ok bool, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l, err := m.table.Acquire(name, holder, m.now(), locktable.Duration(ttl))
	switch {
	case errors.Is(err, locktable.ErrHeld):
		return 0, false, nil
	case err != nil:
		return 0, false, err
	}
	return l.Token, true, nil
}

// Release frees name if holder holds it and its lease is alive, and
// reports whether it did.
func (m *Manager) Release(name, holder string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.table.Release(name, holder, m.now())
}

// Extend keeps holder's live lease on name for another ttl, keeping token.
func (m *Manager) Extend(name, holder string, token uint64, ttl time.Duration) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, err := m.table.Extend(name, holder, token, m.now(), locktable.Duration(ttl))
	return err
}

// IsValidToken reports whether token is name's current token, regardless of
// time (the seed's is_valid_token). Prefer Check.
func (m *Manager) IsValidToken(name string, token uint64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.table.IsValidToken(name, token)
}

// Check reports whether token is name's current token and its lease is
// still alive.
func (m *Manager) Check(name string, token uint64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.table.Check(name, token, m.now())
}
