package service

import (
	"context"
	"sync"
	"testing"
)

// Calls that arrive while a question to the leader is out share the next
// one: they never take an answer the leader may have given before they
// arrived, and a burst costs two round trips, not one each.
func TestReadIndexSharesTheNextQuestion(t *testing.T) {
	ri := newReadIndex()
	defer ri.close()
	asked := make(chan chan uint64)
	ask := func(ctx context.Context) (uint64, error) {
		answer := make(chan uint64)
		asked <- answer
		return <-answer, nil
	}
	first := make(chan uint64)
	go func() { r, _ := ri.next(context.Background(), ask); first <- r }()
	q1 := <-asked // the first question is out

	// Calls arriving now wait for the second question.
	const n = 5
	var wg sync.WaitGroup
	got := make([]uint64, n)
	for i := range n {
		wg.Add(1)
		go func() { defer wg.Done(); got[i], _ = ri.next(context.Background(), ask) }()
	}
	eventually(t, "the calls to join the next question", func() bool {
		ri.mu.Lock()
		defer ri.mu.Unlock()
		return ri.pending != nil && ri.pending.calls == n
	})
	q1 <- 7
	if r := <-first; r != 7 {
		t.Fatalf("first call: %d", r)
	}
	q2 := <-asked
	q2 <- 9
	wg.Wait()
	for i, r := range got {
		if r != 9 {
			t.Errorf("call %d took %d, an answer from before it arrived", i, r)
		}
	}
	select {
	case q := <-asked:
		t.Fatalf("a third question was asked: %v", q)
	default:
	}
}

// A call given up while waiting answers its context's error; a closed
// read index asks nothing.
func TestReadIndexGivenUpAndClosed(t *testing.T) {
	ri := newReadIndex()
	block := make(chan struct{})
	ask := func(ctx context.Context) (uint64, error) {
		select {
		case <-block:
		case <-ctx.Done():
		}
		return 0, ctx.Err()
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := ri.next(ctx, ask); err == nil {
		t.Fatal("a given-up call answered")
	}
	ri.close() // ends the question out
	if _, err := ri.next(context.Background(), ask); err == nil {
		t.Fatal("a closed read index answered")
	}
	close(block)
}
