package clock

import (
	"slices"
	"testing"
	"time"
)

func TestFakeRunsDueTimersInOrder(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f := NewFake(start)
	var ran []string
	at := map[string]time.Duration{}
	arm := func(name string, d time.Duration) Timer {
		return f.AfterFunc(d, func() {
			ran = append(ran, name)
			at[name] = f.Now().Sub(start)
		})
	}
	arm("b", 2*time.Second)
	arm("a", time.Second)
	stopped := arm("x", 1500*time.Millisecond)
	arm("c", 3*time.Second)
	if !stopped.Stop() {
		t.Fatal("Stop of a pending timer reported false")
	}
	if stopped.Stop() {
		t.Fatal("second Stop reported true")
	}
	f.Advance(2 * time.Second)
	if want := []string{"a", "b"}; !slices.Equal(ran, want) {
		t.Fatalf("ran %v, want %v", ran, want)
	}
	if at["a"] != time.Second || at["b"] != 2*time.Second {
		t.Fatalf("timers saw %v, want their own deadlines", at)
	}
	if got := f.Now().Sub(start); got != 2*time.Second {
		t.Fatalf("now %v after Advance(2s)", got)
	}
	if f.Pending() != 1 {
		t.Fatalf("pending %d, want 1", f.Pending())
	}
	f.Advance(time.Second - 1)
	if len(ran) != 2 {
		t.Fatalf("c ran before its deadline: %v", ran)
	}
	f.Advance(1)
	if want := []string{"a", "b", "c"}; !slices.Equal(ran, want) {
		t.Fatalf("ran %v, want %v", ran, want)
	}
}

func TestFakeTimerArmedByATimerRunsInTheSameAdvance(t *testing.T) {
	f := NewFake(time.Unix(0, 0))
	n := 0
	var rearm func()
	rearm = func() {
		n++
		f.AfterFunc(time.Second, rearm)
	}
	f.AfterFunc(time.Second, rearm)
	f.Advance(5 * time.Second)
	if n != 5 {
		t.Fatalf("re-armed timer ran %d times in 5s, want 5", n)
	}
}

func TestFakeZeroDelayRunsAtOnce(t *testing.T) {
	f := NewFake(time.Unix(0, 0))
	done := make(chan struct{})
	f.AfterFunc(0, func() { close(done) })
	<-done
}

func TestFakeAtFuncRunsAtItsInstant(t *testing.T) {
	start := time.Unix(0, 0)
	f := NewFake(start)
	var at time.Duration
	ran := 0
	f.AtFunc(start.Add(3*time.Second), func() { ran++; at = f.Now().Sub(start) })
	f.Advance(2 * time.Second)
	if ran != 0 {
		t.Fatal("ran before its instant")
	}
	f.Advance(2 * time.Second)
	if ran != 1 || at != 3*time.Second {
		t.Fatalf("ran %d times, at %v; want once at 3s", ran, at)
	}
	done := make(chan struct{})
	f.AtFunc(start, func() { close(done) }) // in the past: at once
	<-done
	var _ AtClock = f
}

// The Uncounted view's timers run with the others but are left out of
// Pending, Next and Scheduled.
func TestFakeUncountedViewIsLeftOutOfTheCounts(t *testing.T) {
	start := time.Unix(0, 0)
	f := NewFake(start)
	server := f.Uncounted()
	var ran []string
	server.AfterFunc(time.Second, func() { ran = append(ran, "server") })
	server.AtFunc(start.Add(3*time.Second), func() { ran = append(ran, "server at") })
	if f.Pending() != 0 || f.Scheduled() != 0 {
		t.Fatalf("uncounted timers counted: pending %d, scheduled %d", f.Pending(), f.Scheduled())
	}
	if _, ok := f.Next(); ok {
		t.Fatal("Next found an uncounted timer")
	}
	f.AfterFunc(2*time.Second, func() { ran = append(ran, "client") })
	if f.Pending() != 1 || f.Scheduled() != 1 {
		t.Fatalf("pending %d, scheduled %d; want 1, 1", f.Pending(), f.Scheduled())
	}
	if next, ok := f.Next(); !ok || next != 2*time.Second {
		t.Fatalf("Next = %v %v, want 2s (the counted timer, not the earlier uncounted one)", next, ok)
	}
	if !server.Now().Equal(f.Now()) {
		t.Fatal("the view reads another time")
	}
	f.Advance(3 * time.Second)
	if want := []string{"server", "client", "server at"}; !slices.Equal(ran, want) {
		t.Fatalf("ran %v, want %v", ran, want)
	}
	if f.Pending() != 0 || f.Scheduled() != 1 {
		t.Fatalf("after running: pending %d, scheduled %d; want 0, 1", f.Pending(), f.Scheduled())
	}
}

// Jump moves the time first and then runs what fell due, all seeing the
// time at the end.
func TestFakeJumpRunsDueTimersAtTheEnd(t *testing.T) {
	start := time.Unix(0, 0)
	f := NewFake(start)
	var at []time.Duration
	for _, d := range []time.Duration{time.Second, 2 * time.Second, 5 * time.Second} {
		f.AfterFunc(d, func() { at = append(at, f.Now().Sub(start)) })
	}
	f.Jump(3 * time.Second)
	if want := []time.Duration{3 * time.Second, 3 * time.Second}; !slices.Equal(at, want) {
		t.Fatalf("timers saw %v, want %v", at, want)
	}
	if f.Pending() != 1 {
		t.Fatalf("pending %d, want 1", f.Pending())
	}
	if next, ok := f.Next(); !ok || next != 2*time.Second {
		t.Fatalf("Next = %v %v, want 2s", next, ok)
	}
}

// Set never moves the time backwards.
func TestFakeSetNeverGoesBack(t *testing.T) {
	start := time.Unix(100, 0)
	f := NewFake(start)
	f.Set(start.Add(-time.Second))
	if !f.Now().Equal(start) {
		t.Fatalf("Set moved the time back to %v", f.Now())
	}
}

func TestSystemIsAClock(t *testing.T) {
	var c Clock = System{}
	done := make(chan struct{})
	c.AfterFunc(0, func() { close(done) })
	<-done
	if c.Now().IsZero() {
		t.Fatal("System.Now is zero")
	}
}
