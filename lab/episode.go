package lab

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencelock/fencelock/fence"
	"github.com/fencelock/fencelock/internal/locktable"
)

// checkPlace is where, if anywhere, client A checks its token before it
// writes.
type checkPlace int

const (
	noCheck          checkPlace = iota
	checkBeforePause            // A reads "still mine", then is paused, then writes
	checkAfterPause             // A is paused, then checks, then writes
)

// episode is the page's central story, played on fencelock's lock table:
// A is granted the lease at t=0, is paused, B asks for the lease at t=pause and
// writes if granted, then A wakes and writes. Blocks 2–4 and the assembly's
// replays are all episodes with different settings.
type episode struct {
	ttl    time.Duration
	pause  time.Duration
	check  checkPlace
	fenced bool // writes go through a fence.Guard instead of straight in
}

// Values the page's clients write: B's fresh result and A's stale one.
const (
	valueB = 100
	valueA = 200
)

// write is one write the resource accepted.
type write struct {
	who   string
	value int
}

// outcome is what an episode did to the lock table and the resource.
type outcome struct {
	tokenA, tokenB uint64    // tokenB is 0 when B was refused the lease
	errA, errB     error     // why the fence refused A's or B's write, if it did
	res            *resource // what the writes did
}

func (o outcome) bGranted() bool { return o.tokenB != 0 }

// final is the resource's value, 0 if nobody wrote.
func (o outcome) final() int {
	ws := o.res.writes
	if len(ws) == 0 {
		return 0
	}
	return ws[len(ws)-1].value
}

// writers spells who wrote, in order: "BA" is B then A.
func (o outcome) writers() string {
	s := ""
	for _, w := range o.res.writes {
		s += w.who
	}
	return s
}

// staleWon: A's out-of-date write landed on top of B's.
func (o outcome) staleWon() bool { return o.bGranted() && o.final() == valueA }

const episodeKey = "c11/resource"

// resource is the thing the lock protects: a register that either applies
// every write (unfenced) or lets a fence.Guard decide. The page's fenced
// resource refuses a missing token or one below the highest it has honoured
// and accepts an equal one; fence.Guard has the same rule, with token 0
// standing for the page's None, so the figures carry over unchanged.
type resource struct {
	guard  *fence.Guard // nil when unfenced
	writes []write
}

// write applies one write. A refusal by the fence is an outcome, not a
// failure, so it comes back as refusal; err is anything else going wrong.
func (r *resource) write(who string, value int, token uint64) (refusal, err error) {
	apply := func() error {
		r.writes = append(r.writes, write{who, value})
		return nil
	}
	if r.guard == nil {
		return nil, apply()
	}
	err = r.guard.Do(context.Background(), episodeKey, token, apply)
	if errors.Is(err, fence.ErrStaleToken) || errors.Is(err, fence.ErrMissingToken) {
		return err, nil
	}
	return nil, err
}

func (e episode) run() (outcome, error) {
	out := outcome{res: &resource{}}
	res := out.res
	if e.fenced {
		res.guard = fence.NewGuard()
	}
	table := locktable.New()
	ttl := locktable.Duration(e.ttl)

	a, err := table.Acquire(episodeKey, "A", 0, ttl)
	if err != nil {
		return out, fmt.Errorf("lab: A's first acquire: %w", err)
	}
	out.tokenA = a.Token

	// The page's client check compares tokens only ("has anyone been granted
	// the lock since me?"), which is IsValidToken: no clock involved. The
	// time-aware Check would also fail for a lease that has merely run out,
	// a different (and kinder) model than the page measures.
	checkPassed := true
	if e.check == checkBeforePause {
		checkPassed = table.IsValidToken(episodeKey, a.Token)
	}

	now := locktable.Time(e.pause)
	b, err := table.Acquire(episodeKey, "B", now, ttl)
	switch {
	case err == nil:
		out.tokenB = b.Token
		if out.errB, err = res.write("B", valueB, b.Token); err != nil {
			return out, err
		}
	case errors.Is(err, locktable.ErrHeld):
		// A's lease is still alive: B waits its turn, which here means never.
	default:
		return out, fmt.Errorf("lab: B's acquire: %w", err)
	}

	if e.check == checkAfterPause {
		checkPassed = table.IsValidToken(episodeKey, a.Token)
	}
	if checkPassed {
		if out.errA, err = res.write("A", valueA, a.Token); err != nil {
			return out, err
		}
	}
	return out, nil
}
