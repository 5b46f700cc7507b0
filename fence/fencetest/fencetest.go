// Package fencetest checks that a fence keeps fence.RWFence's rule, the
// one fence.RWGuard keeps in memory, so that every durable adapter is
// held to the same steps.
package fencetest

import (
	"context"
	"errors"
	"testing"

	"github.com/fencelock/fencelock/fence"
)

// Step is one admission and what must come of it.
type Step struct {
	Name    string
	Write   bool
	Token   uint64
	WantErr error  // nil, fence.ErrMissingToken or fence.ErrStaleToken
	Highest uint64 // for a stale answer: the token it names as making it stale
}

// RWSteps walk the read/write rule through the cases a read/write lock
// produces: readers share, a writer after them supersedes them, a stale
// writer after a reader and a stale reader after a writer are refused.
var RWSteps = []Step{
	{"missing token on a read", false, 0, fence.ErrMissingToken, 0},
	{"missing token on a write", true, 0, fence.ErrMissingToken, 0},
	{"writer 3 writes", true, 3, nil, 0},
	{"writer 3 writes again", true, 3, nil, 0},
	{"writer 3 reads its own write", false, 3, nil, 0},
	{"reader 5 reads", false, 5, nil, 0},
	{"reader 4, granted with 5, reads after it", false, 4, nil, 0},
	{"a stale writer (3) after reader 5 is refused", true, 3, fence.ErrStaleToken, 5},
	{"a stale reader (2) from before writer 3 is refused", false, 2, fence.ErrStaleToken, 3},
	{"writer 7 after the readers", true, 7, nil, 0},
	{"a stale reader (5) after writer 7 is refused", false, 5, fence.ErrStaleToken, 7},
	{"a stale writer (6) after writer 7 is refused", true, 6, fence.ErrStaleToken, 7},
	{"reader 8 after writer 7", false, 8, nil, 0},
	{"a stale writer (7) after reader 8 is refused", true, 7, fence.ErrStaleToken, 8},
	{"a reader (7) at the last write still reads", false, 7, nil, 0},
}

// CheckRW runs RWSteps on resource "doc" of the fence open returns. After
// each step it calls reopen, when not nil, for the fence to go on with
// (a durable fence: closed and opened again), so that the marks are shown
// to survive a restart at every point.
func CheckRW(t *testing.T, f fence.RWFence, reopen func() fence.RWFence) {
	t.Helper()
	ctx := context.Background()
	for _, s := range RWSteps {
		ran := false
		effect := func(context.Context) error { ran = true; return nil }
		var err error
		if s.Write {
			err = f.AdmitWrite(ctx, "doc", s.Token, effect)
		} else {
			err = f.AdmitRead(ctx, "doc", s.Token, effect)
		}
		if !errors.Is(err, s.WantErr) || (s.WantErr == nil && err != nil) {
			t.Fatalf("%s: err %v, want %v", s.Name, err, s.WantErr)
		}
		if ran != (s.WantErr == nil) {
			t.Fatalf("%s: effect ran=%v", s.Name, ran)
		}
		var se *fence.StaleTokenError
		if s.WantErr == fence.ErrStaleToken && (!errors.As(err, &se) || se.Token != s.Token || se.Highest != s.Highest) {
			t.Fatalf("%s: %v, want token %d refused naming %d", s.Name, err, s.Token, s.Highest)
		}
		if reopen != nil {
			f = reopen()
		}
	}
}
