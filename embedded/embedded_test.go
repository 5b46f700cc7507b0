package embedded

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }
func newFake() *fakeClock                    { return &fakeClock{t: time.Unix(1_700_000_000, 0)} }
func secs(s float64) time.Duration           { return time.Duration(s * float64(time.Second)) }

// The GC-pause story of the seed exercise, with the injected clock: A's
// lease runs out while A is paused, B takes over, and A's late release must
// not free B's lock (the naive release in the exercise's starter code would).
func TestPausedHolderCannotReleaseSuccessor(t *testing.T) {
	c := newFake()
	m := New(WithClock(c.now))
	a, ok, err := m.Acquire("ledger", "A", 10*time.Second)
	if err != nil || !ok || a != 1 {
		t.Fatalf("A: %d %v %v", a, ok, err)
	}
	c.advance(secs(10.1)) // A is paused past its lease
	b, ok, _ := m.Acquire("ledger", "B", 10*time.Second)
	if !ok || b != 2 {
		t.Fatalf("B: %d %v", b, ok)
	}
	if released, _ := m.Release("ledger", "A"); released {
		t.Fatal("A released B's lock")
	}
	if !m.Check("ledger", b) || m.Check("ledger", a) {
		t.Fatal("B's token must be the live one")
	}
	if _, ok, _ := m.Acquire("ledger", "C", time.Second); ok {
		t.Fatal("C got a lock B still holds")
	}
}

func TestExtendAndExpiry(t *testing.T) {
	c := newFake()
	m := New(WithClock(c.now))
	tok, _, _ := m.Acquire("k", "a", 3*time.Second)
	c.advance(2 * time.Second)
	if err := m.Extend("k", "a", tok, 3*time.Second); err != nil {
		t.Fatal(err)
	}
	c.advance(2 * time.Second)
	if !m.Check("k", tok) {
		t.Fatal("extended lease expired early")
	}
	c.advance(time.Second)
	if m.Check("k", tok) {
		t.Fatal("lease alive at its expiry")
	}
	if !m.IsValidToken("k", tok) {
		t.Fatal("IsValidToken ignores time, as the seed's does")
	}
	if err := m.Extend("k", "a", tok, time.Second); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("extending an expired lease: %v", err)
	}
}

// A clock that jumps backwards must not resurrect or shorten anything.
func TestClockGoingBackwards(t *testing.T) {
	c := newFake()
	m := New(WithClock(c.now))
	tok, _, _ := m.Acquire("k", "a", 5*time.Second)
	c.advance(6 * time.Second)
	if m.Check("k", tok) {
		t.Fatal("alive after its ttl")
	}
	c.advance(-4 * time.Second)
	if m.Check("k", tok) {
		t.Fatal("a backwards clock revived an expired lease")
	}
}

func TestBadInput(t *testing.T) {
	m := New()
	if _, _, err := m.Acquire("", "a", time.Second); !errors.Is(err, ErrInvalidKey) {
		t.Fatal(err)
	}
	if _, _, err := m.Acquire("k", "a", 0); !errors.Is(err, ErrInvalidTTL) {
		t.Fatal(err)
	}
	if _, err := m.Release("k", ""); !errors.Is(err, ErrInvalidHolder) {
		t.Fatal(err)
	}
	if tok, ok, err := m.Acquire("k", "a", time.Second); err != nil || !ok || tok != 1 {
		t.Fatalf("bad input consumed a token or changed state: %d %v %v", tok, ok, err)
	}
}

func TestConcurrentUseKeepsMutualExclusion(t *testing.T) {
	c := newFake()
	m := New(WithClock(c.now))
	done := make(chan uint64)
	for w := 0; w < 8; w++ {
		go func(w int) {
			var got uint64
			for i := 0; i < 100; i++ {
				if tok, ok, _ := m.Acquire("k", fmt.Sprint("w", w), time.Hour); ok {
					got = tok
				}
			}
			done <- got
		}(w)
	}
	winners := 0
	for w := 0; w < 8; w++ {
		if <-done != 0 {
			winners++
		}
	}
	if winners != 1 {
		t.Fatalf("%d holders got an hour-long lease on one key", winners)
	}
}

func ExampleManager() {
	now := time.Unix(0, 0)
	m := New(WithClock(func() time.Time { return now }))
	t1, _, _ := m.Acquire("resource", "client-a", 10*time.Second)
	_, ok, _ := m.Acquire("resource", "client-b", 10*time.Second)
	fmt.Println(t1, ok)
	now = now.Add(10 * time.Second)
	t2, _, _ := m.Acquire("resource", "client-b", 10*time.Second)
	fmt.Println(t2, m.Check("resource", t1), m.Check("resource", t2))
	// Output:
	// 1 false
	// 2 false true
}
