package raftport

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Terms from peers (issue 41). raft takes a newer term from any message
// of a member and adds one to its term at each election: a term of
// 2^64-1 wraps at the next election, after which no candidate's term is
// ever newer than the voters' and no leader is elected again, on either
// engine, even after restarts (the term is durable). So both engines
// hand every term a peer sends through a TermGuard before raft sees it,
// and drop the message when the guard refuses it:
//
//   - a term above MaxTerm. The room above it (3·2^62 terms) is for
//     elections, one term each: it is never used up.
//   - a term more than a bounded step ahead of this node's own: TermStep,
//     plus TermRate for every second since this node's term last moved
//     (in this process). A peer can thus raise a node's term only by
//     TermStep at a time, each raise a durable write (a few thousand a
//     second at most), plus TermRate a second: at 2^8·10^4 + 2^24 terms
//     a second it takes a member-looking process thousands of years of
//     sending to bring a term to MaxTerm.
//
// Legitimate terms stay far inside the step. With pre-vote (on in both
// engines) a node cut off from the others does not raise its term, so
// it comes back at the term it left with; the others' terms moved by
// one per election they held meanwhile, and an election takes an
// election timeout at least, so a term more than TermRate·seconds ahead
// of a node whose term stood still that long was never sent by an
// election. What a refused term costs is a delay, never a node for good:
// a node restarted behind the others by more than TermStep terms takes
// the leader's term once (gap−TermStep)/TermRate seconds have passed.

// MaxTerm is the highest term a peer's message may carry.
const MaxTerm uint64 = 1 << 62

// TermStep is how far ahead of this node's term a peer's term may be
// at once; TermRate adds to it for every second the node's term has not
// moved.
const (
	TermStep uint64 = 1 << 8
	TermRate uint64 = 1 << 24
)

// ErrTerm: a peer's message carries a term the TermGuard refuses.
var ErrTerm = errors.New("a term raft must not take from a peer")

// TermGuard decides which terms a node takes from its peers, counts the
// messages refused and logs them, one line per refusalLogEvery at most.
type TermGuard struct {
	log *slog.Logger
	now func() time.Time

	mu       sync.Mutex
	seen     bool
	term     uint64    // this node's term, as last seen
	moved    time.Time // when it was first seen at term: since then it stood still
	lastLog  time.Time
	unlogged int64
	refused  atomic.Int64
}

// NewTermGuard is a guard that logs its refusals to log; now is the
// clock of the steps (time.Now when nil).
func NewTermGuard(log *slog.Logger, now func() time.Time) *TermGuard {
	if now == nil {
		now = time.Now
	}
	return &TermGuard{log: log, now: now, moved: now()}
}

// Check says why a peer's message of term must not reach raft on a node
// whose term is current: nil when it may.
func (g *TermGuard) Check(term, current uint64) error {
	if term > MaxTerm {
		return fmt.Errorf("%w: term %d is above the highest a peer may send (%d)", ErrTerm, term, MaxTerm)
	}
	since := g.note(current)
	if term <= current || term-current <= TermStep {
		return nil
	}
	ahead := term - current
	secs := uint64(max(since, 0) / time.Second)
	if secs >= MaxTerm/TermRate || ahead-TermStep <= secs*TermRate {
		return nil
	}
	return fmt.Errorf("%w: term %d is %d ahead of this node's %d, more than the %d it may be after %v at that term",
		ErrTerm, term, ahead, current, TermStep+secs*TermRate, since.Truncate(time.Millisecond))
}

// note records that this node's term is current and answers how long it
// has been.
func (g *TermGuard) note(current uint64) time.Duration {
	now := g.now()
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.seen || current != g.term {
		if g.seen {
			g.moved = now
		}
		g.seen, g.term = true, current
	}
	return now.Sub(g.moved)
}

// Refused counts a message refused (kind: its type; from: the member
// it says it comes from; err: why) and logs it, with those refused since
// the last line, unless a line was logged within refusalLogEvery.
func (g *TermGuard) Refused(kind, from string, err error) {
	g.refused.Add(1)
	now := g.now()
	g.mu.Lock()
	g.unlogged++
	if !g.lastLog.IsZero() && now.Sub(g.lastLog) < refusalLogEvery {
		g.mu.Unlock()
		return
	}
	n := g.unlogged
	g.unlogged, g.lastLog = 0, now
	g.mu.Unlock()
	g.log.Warn("raft: a peer's message refused before raft took it", "kind", kind, "from", from, "err", err,
		"refused", n, "within", refusalLogEvery.String(), "total", g.refused.Load())
}

// Count is how many messages the guard refused.
func (g *TermGuard) Count() int64 { return g.refused.Load() }
