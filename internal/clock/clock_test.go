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
