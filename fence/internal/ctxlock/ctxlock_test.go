package ctxlock

import (
	"context"
	"errors"
	"testing"
)

func TestLockGivesUpWhenTheContextEnds(t *testing.T) {
	m := New()
	done, cancel := context.WithCancel(context.Background())
	cancel()
	// Free: taken even with an ended context.
	if err := m.Lock(done); err != nil {
		t.Fatalf("free mutex: %v", err)
	}
	// Held: an ended context gives up with its error.
	if err := m.Lock(done); !errors.Is(err, context.Canceled) {
		t.Fatalf("held mutex, ended context: %v", err)
	}
	got := make(chan error, 1)
	go func() { got <- m.Lock(context.Background()) }()
	m.Unlock()
	if err := <-got; err != nil {
		t.Fatalf("waiter after unlock: %v", err)
	}
	m.Unlock()
}
