// Package ctxlock is the mutex the fences hold across a check and its
// effect: Lock gives up when the caller's context ends, so a writer
// queued behind a slow effect can leave the queue instead of waiting
// for it.
package ctxlock

import "context"

// Mutex is a one-slot semaphore; make it with New.
type Mutex struct{ ch chan struct{} }

// New is an unlocked Mutex.
func New() *Mutex { return &Mutex{ch: make(chan struct{}, 1)} }

// Lock takes m, waiting until it is free or ctx ends (ctx's error). A
// free m is taken even when ctx has already ended, so a call that needs
// no wait never fails for it.
func (m *Mutex) Lock(ctx context.Context) error {
	select {
	case m.ch <- struct{}{}:
		return nil
	default:
	}
	select {
	case m.ch <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Unlock frees m, which must be locked.
func (m *Mutex) Unlock() { <-m.ch }
