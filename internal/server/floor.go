package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fencelock/fencelock/internal/fsm"
)

// tokenBlock is how many tokens one reservation covers: one fsync of the
// state file per tokenBlock grants.
const tokenBlock = 1024

// floorFSM keeps the state file's token ceiling at or above every token
// the state machine has applied. It raises the ceiling (fsynced) inside
// Apply, before the entry's result reaches the proposer, so no token is
// ever answered that the ceiling does not cover; followers reserve the
// same way as they apply. It changes nothing the state machine computes.
type floorFSM struct {
	raft.FSM
	tokens  interface{ LastToken() uint64 }
	state   *stateFile
	ceiling atomic.Uint64
	failed  atomic.Pointer[error]
	// raiseHook, set by tests before the node serves, replaces the
	// state file's update.
	raiseHook func(next uint64) error

	mu     sync.Mutex
	raised chan struct{} // closed, and replaced, when a reservation ends
}

func newFloorFSM(f raft.FSM, state *stateFile) (*floorFSM, bool) {
	tokens, ok := f.(interface{ LastToken() uint64 })
	if !ok {
		return nil, false
	}
	ff := &floorFSM{FSM: f, tokens: tokens, state: state, raised: make(chan struct{})}
	ff.ceiling.Store(state.get().Ceiling)
	return ff, true
}

func (f *floorFSM) Apply(l *raft.Log) any {
	r := f.FSM.Apply(l)
	f.reserve()
	return r
}

// ApplyBatch applies a batch, then reserves once for every token it
// issued, still before raft answers any of its entries. A state machine
// that cannot batch applies each command as raft itself would (raft calls
// Apply for commands only and answers the other entries nil).
func (f *floorFSM) ApplyBatch(logs []*raft.Log) []any {
	var out []any
	if b, ok := f.FSM.(raft.BatchingFSM); ok {
		out = b.ApplyBatch(logs)
	} else {
		out = make([]any, len(logs))
		for i, l := range logs {
			if l.Type == raft.LogCommand {
				out[i] = f.FSM.Apply(l)
			}
		}
	}
	f.reserve()
	return out
}

// raise records a ceiling of next tokens in the state file, fsynced.
func (f *floorFSM) raise(next uint64) error {
	if f.raiseHook != nil {
		return f.raiseHook(next)
	}
	return f.state.update(func(s *dirState) { s.Ceiling = max(s.Ceiling, next) }, true)
}

func (f *floorFSM) Restore(rc io.ReadCloser) error {
	err := f.FSM.Restore(rc)
	f.reserve()
	return err
}

func (f *floorFSM) reserve() {
	last := f.tokens.LastToken()
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
func (f *floorFSM) reserved() {
	f.mu.Lock()
	close(f.raised)
	f.raised = make(chan struct{})
	f.mu.Unlock()
}

// covers waits, at most for timeout, until the ceiling covers token, and
// says whether it does. A grant that reaches its caller other than as its
// own proposal's answer — a waiter's, handed over from the queue while
// the state machine applied someone else's entry — is answered only then,
// as the proposer's grants are (apply checks durableErr): the reservation
// runs right after the entry's batch is applied, before raft answers it.
func (f *floorFSM) covers(token uint64, timeout time.Duration) error {
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
func (f *floorFSM) err() error {
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

// raisePendingFloor commits the token floor that `fencelock recover` left
// in the state file, before the new leader serves any grant, and clears
// it once applied. It returns false when ctx ended first.
func (s *Server) raisePendingFloor(ctx context.Context) bool {
	if s.node.state == nil {
		return true
	}
	for {
		floor := s.node.state.get().PendingFloor
		if floor == 0 {
			return true
		}
		_, err := s.propose(fsm.Command{Op: fsm.OpTokenFloor, Token: floor})
		if err == nil {
			err = s.node.state.update(func(st *dirState) {
				if st.PendingFloor == floor {
					st.PendingFloor = 0
				}
			}, true)
		}
		if err == nil {
			s.log.Warn("raised the token counter to the floor recorded by fencelock recover",
				"floor", floor, "last_token", s.fsm.LastToken())
			return true
		}
		s.log.Warn("raising the token floor failed", "floor", floor, "err", err)
		if !sleepCtx(ctx, 100*time.Millisecond) {
			return false
		}
	}
}

// covered is nil once token is covered by this node's token ceiling (see
// floorFSM.covers); an error says it is not and will not be.
func (n *node) covered(token uint64, timeout time.Duration) error {
	if n.floor == nil {
		return nil
	}
	if err := n.floor.covers(token, timeout); err != nil {
		return fmt.Errorf("%w: %v", errFloor, err)
	}
	return nil
}

// durableErr is non-nil once this node could not record its token floor.
func (n *node) durableErr() error {
	if n.floor == nil {
		return nil
	}
	if err := n.floor.err(); err != nil {
		return fmt.Errorf("%w: %v", errFloor, err)
	}
	return nil
}
