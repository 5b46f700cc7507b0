package raftport

import (
	"errors"
	"log/slog"
	"math"
	"testing"
	"time"
)

// The terms a node takes from its peers (issue 41): never above
// MaxTerm, never more than TermStep ahead of its own at once, plus
// TermRate for every second its term stood still; refusals are counted
// and logged once per refusalLogEvery.
func TestTermGuard(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	h := &countingHandler{}
	g := NewTermGuard(slog.New(h), func() time.Time { return now })
	refused := func(term, current uint64) bool {
		t.Helper()
		err := g.Check(term, current)
		if err != nil && !errors.Is(err, ErrTerm) {
			t.Fatalf("Check(%d, %d): %v, not ErrTerm", term, current, err)
		}
		return err != nil
	}
	for _, c := range []struct {
		term, current uint64
		refused       bool
	}{
		{math.MaxUint64, 5, true},            // the finding: it wraps
		{MaxTerm + 1, MaxTerm, true},         // above the bound, even one ahead
		{MaxTerm, MaxTerm - 1, false},        // at it
		{5 + TermStep, 5, false},             // a step ahead
		{5 + TermStep + 1, 5, true},          // more, with the term just seen
		{3, 5, false},                        // behind: raft ignores it
		{7, math.MaxUint64, false},           // a node whose term wrapped before: no overflow
		{MaxTerm, math.MaxUint64 - 1, false}, // the same
	} {
		if got := refused(c.term, c.current); got != c.refused {
			t.Errorf("Check(%d, %d) refused %v, want %v", c.term, c.current, got, c.refused)
		}
	}

	// The step grows by TermRate a second while the node's term stands
	// still, and starts again when it moves.
	g = NewTermGuard(slog.New(h), func() time.Time { return now })
	refused(10, 10) // the node's term is 10 from now on
	now = now.Add(3 * time.Second)
	if refused(10+TermStep+3*TermRate, 10) {
		t.Error("refused a term within three seconds' step")
	}
	if !refused(10+TermStep+3*TermRate+1, 10) {
		t.Error("took a term beyond three seconds' step")
	}
	refused(11, 11) // the term moved
	if !refused(11+TermStep+1, 11) {
		t.Error("took a term beyond a step just after the term moved")
	}
	// A node restarted far behind (a node's first term counts from the
	// guard's start): taken once the step has grown to the gap.
	g = NewTermGuard(slog.New(h), func() time.Time { return now })
	gap := TermStep + 5*TermRate
	if !refused(20+gap, 20) {
		t.Error("took at once a term 5 s' step ahead")
	}
	now = now.Add(5 * time.Second)
	if refused(20+gap, 20) {
		t.Error("still refused after 5 s at the same term")
	}
	// Centuries at one term do not overflow the step; MaxTerm still
	// holds.
	now = now.Add(math.MaxInt64)
	if refused(20+1e16, 20) || !refused(MaxTerm+1, 20) {
		t.Error("after centuries at one term: a term within the step refused, or one above MaxTerm taken")
	}

	// Refusals: counted each, logged once per refusalLogEvery.
	h = &countingHandler{}
	g = NewTermGuard(slog.New(h), func() time.Time { return now })
	for range 5 {
		g.Refused("MsgHeartbeat", "n2", g.Check(math.MaxUint64, 1))
	}
	if g.Count() != 5 || h.count() != 1 {
		t.Fatalf("5 refusals: counted %d, logged %d lines; want 5 and 1", g.Count(), h.count())
	}
	now = now.Add(refusalLogEvery)
	g.Refused("MsgVote", "n2", g.Check(math.MaxUint64, 1))
	if h.count() != 2 {
		t.Fatalf("a refusal %v later logged %d lines in all, want 2", refusalLogEvery, h.count())
	}
}
