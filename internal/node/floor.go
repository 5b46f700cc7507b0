package node

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// tokenBlock is how many tokens one reservation covers: one fsync of the
// state file per tokenBlock grants.
const tokenBlock = 1024

// tokenFloor keeps the state file's token ceiling at or above every token
// the state machine has applied. machine raises it (fsynced) right after
// each apply, before the entry's result reaches the proposer, so no token
// is ever answered that the ceiling does not cover; followers reserve the
// same way as they apply. It changes nothing the state machine computes.
type tokenFloor struct {
	state   *stateFile
	ceiling atomic.Uint64
	failed  atomic.Pointer[error]
	// raiseHook, set by tests before the node serves, replaces the
	// state file's update.
	raiseHook func(next uint64) error

	mu     sync.Mutex
	raised chan struct{} // closed, and replaced, when a reservation ends
}

func newTokenFloor(state *stateFile) *tokenFloor {
	f := &tokenFloor{state: state, raised: make(chan struct{})}
	f.ceiling.Store(state.get().Ceiling)
	return f
}

// raise records a ceiling of next tokens in the state file, fsynced.
func (f *tokenFloor) raise(next uint64) error {
	if f.raiseHook != nil {
		return f.raiseHook(next)
	}
	return f.state.update(func(s *dirState) { s.Ceiling = max(s.Ceiling, next) }, true)
}

// reserve makes the ceiling cover last, the last token applied.
func (f *tokenFloor) reserve(last uint64) {
	if last <= f.ceiling.Load() {
		return
	}
	next := last + tokenBlock
	defer f.reserved()
	if err := f.raise(next); err != nil {
		f.failed.CompareAndSwap(nil, &err)
		return
	}
	f.ceiling.Store(next)
}

// reserved wakes those waiting in covers.
func (f *tokenFloor) reserved() {
	f.mu.Lock()
	close(f.raised)
	f.raised = make(chan struct{})
	f.mu.Unlock()
}

// covers waits, at most for timeout, until the ceiling covers token, and
// says whether it does. A grant that reaches its caller other than as its
// own proposal's answer — a waiter's, handed over from the queue while
// the state machine applied someone else's entry — is answered only then,
// as the proposer's grants are (Propose checks err): the reservation runs
// right after the entry's batch is applied, before raft answers it.
func (f *tokenFloor) covers(token uint64, timeout time.Duration) error {
	var deadline <-chan time.Time
	for {
		f.mu.Lock()
		raised := f.raised
		f.mu.Unlock()
		if err := f.err(); err != nil {
			return err
		}
		if token <= f.ceiling.Load() {
			return nil
		}
		if deadline == nil {
			t := time.NewTimer(timeout)
			defer t.Stop()
			deadline = t.C
		}
		select {
		case <-raised:
		case <-deadline:
			return fmt.Errorf("token %d is not yet covered by the ceiling %d after %v", token, f.ceiling.Load(), timeout)
		}
	}
}

// err is the first failure to reserve tokens, after which the node must
// not answer grants: the tokens it applied may not be covered.
func (f *tokenFloor) err() error {
	if p := f.failed.Load(); p != nil {
		return *p
	}
	return nil
}

// checkpointer syncs the state file about once a second, so that the
// watermark of durably written entries survives a power loss.
type checkpointer struct {
	stop chan struct{}
	done chan struct{}
	once sync.Once
}

func startCheckpointer(state *stateFile, every time.Duration) *checkpointer {
	c := &checkpointer{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(c.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-c.stop:
				return
			case <-t.C:
				state.sync() // a failure is sticky: the next reservation reports it
			}
		}
	}()
	return c
}

func (c *checkpointer) Close() error {
	c.once.Do(func() { close(c.stop) })
	<-c.done
	return nil
}

// errFloor wraps a reservation failure for the proposer.
var errFloor = errors.New("the token floor could not be recorded")
