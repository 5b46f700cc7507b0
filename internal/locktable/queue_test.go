package locktable

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
)

// recorder collects events as "kind key holder token" strings.
type recorder struct{ got []string }

func (r *recorder) observe(ev Event) {
	r.got = append(r.got, fmt.Sprintf("%s %s %s %d", ev.Kind, ev.Key, ev.Holder, ev.Token))
}

func (r *recorder) take() []string {
	out := r.got
	r.got = nil
	return out
}

func newRecorded() (*Table, *recorder) {
	tb, r := New(), &recorder{}
	tb.SetObserver(r.observe)
	return tb, r
}

func mustWait(t *testing.T, tb *Table, key, holder string, now Time, ttl Duration, deadline Time) bool {
	t.Helper()
	_, granted, err := tb.Wait(key, holder, now, ttl, deadline)
	if err != nil {
		t.Fatalf("wait %s %s: %v", key, holder, err)
	}
	return granted
}

func TestHandOffOnReleaseIsFIFO(t *testing.T) {
	tb, r := newRecorded()
	if !mustWait(t, tb, "k", "a", 0, 10*sec, NoDeadline) {
		t.Fatal("a not granted on a free key")
	}
	for _, h := range []string{"b", "c", "d"} {
		if mustWait(t, tb, "k", h, 1, 10*sec, NoDeadline) {
			t.Fatalf("%s granted while a holds", h)
		}
	}
	if got, want := tb.Waiters("k"), []string{"b", "c", "d"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("queue %v, want %v", got, want)
	}
	r.take()
	for i, h := range []string{"a", "b", "c", "d"} {
		ok, _ := tb.Release("k", h, Time(2+i))
		if !ok {
			t.Fatalf("%s could not release", h)
		}
		evs := r.take()
		if h == "d" {
			if !reflect.DeepEqual(evs, []string{"released k d 4"}) {
				t.Fatalf("last release: %v", evs)
			}
			break
		}
		next := []string{"b", "c", "d"}[i]
		want := []string{fmt.Sprintf("released k %s %d", h, i+1), fmt.Sprintf("granted k %s %d", next, i+2)}
		if !reflect.DeepEqual(evs, want) {
			t.Fatalf("release by %s: events %v, want %v", h, evs, want)
		}
	}
	if tb.Len() != 0 {
		t.Fatalf("%d entries left after everyone released", tb.Len())
	}
}

func TestHandOffOnExpiryByTick(t *testing.T) {
	tb, r := newRecorded()
	mustWait(t, tb, "k", "a", 0, 10*sec, NoDeadline)
	mustWait(t, tb, "k", "b", 1, 4*sec, NoDeadline)
	r.take()
	if at, ok := tb.NextDeadline(); !ok || at != at10() {
		t.Fatalf("next deadline %v %v", at, ok)
	}
	tb.Tick(at(9.999))
	if evs := r.take(); len(evs) != 0 {
		t.Fatalf("tick before expiry: %v", evs)
	}
	tb.Tick(at(10))
	if evs, want := r.take(), []string{"expired k a 1", "granted k b 2"}; !reflect.DeepEqual(evs, want) {
		t.Fatalf("tick at expiry: %v, want %v", evs, want)
	}
	l, ok := tb.Get("k", at(10))
	if !ok || l.Holder != "b" || l.Expiry != at(14) || l.Granted != at(10) {
		t.Fatalf("after hand-off: %+v %v", l, ok)
	}
	tb.Tick(at(14))
	if evs := r.take(); !reflect.DeepEqual(evs, []string{"expired k b 2"}) {
		t.Fatalf("%v", evs)
	}
	if tb.Len() != 0 || tb.IsValidToken("k", 2) {
		t.Fatal("an expired lease with nobody waiting must be forgotten by Tick")
	}
}

func at10() Time { return at(10) }

// A newcomer arriving after expiry but before any Tick must not barge past
// the queue: the call itself settles the hand-off first.
func TestNoBargingPastTheQueue(t *testing.T) {
	tb, r := newRecorded()
	mustWait(t, tb, "k", "a", 0, 10*sec, NoDeadline)
	mustWait(t, tb, "k", "b", 1, 10*sec, NoDeadline)
	r.take()
	if _, err := tb.Acquire("k", "c", at(10), 10*sec); !errors.Is(err, ErrHeld) {
		t.Fatalf("c barged: %v", err)
	}
	if evs, want := r.take(), []string{"expired k a 1", "granted k b 2"}; !reflect.DeepEqual(evs, want) {
		t.Fatalf("%v, want %v", evs, want)
	}
}

func TestWaiterDeadlines(t *testing.T) {
	tb, r := newRecorded()
	mustWait(t, tb, "k", "a", 0, 10*sec, NoDeadline)
	mustWait(t, tb, "k", "b", 1, 10*sec, at(5))
	mustWait(t, tb, "k", "c", 2, 10*sec, at(20))
	r.take()
	if d, _ := tb.NextDeadline(); d != at(5) {
		t.Fatalf("next deadline %d, want b's", d)
	}
	tb.Tick(at(5))
	if evs := r.take(); !reflect.DeepEqual(evs, []string{"wait-dropped k b 0"}) {
		t.Fatalf("%v", evs)
	}
	tb.Tick(at(10))
	if evs, want := r.take(), []string{"expired k a 1", "granted k c 2"}; !reflect.DeepEqual(evs, want) {
		t.Fatalf("%v, want %v", evs, want)
	}
	// A deadline already passed refuses at once instead of queueing.
	_, granted, err := tb.Wait("k", "d", at(11), sec, at(11))
	if granted || !errors.Is(err, ErrHeld) || len(tb.Waiters("k")) != 0 {
		t.Fatalf("late wait: granted=%v err=%v queue=%v", granted, err, tb.Waiters("k"))
	}
}

// A late waiter at the head is skipped by the hand-off, even without Tick.
func TestHandOffSkipsLateWaiters(t *testing.T) {
	tb, r := newRecorded()
	mustWait(t, tb, "k", "a", 0, 10*sec, NoDeadline)
	mustWait(t, tb, "k", "b", 1, 10*sec, at(3))
	mustWait(t, tb, "k", "c", 1, 10*sec, NoDeadline)
	r.take()
	if ok, _ := tb.Release("k", "a", at(4)); !ok {
		t.Fatal("release")
	}
	want := []string{"released k a 1", "wait-dropped k b 0", "granted k c 2"}
	if evs := r.take(); !reflect.DeepEqual(evs, want) {
		t.Fatalf("%v, want %v", evs, want)
	}
}

func TestCancelWaitAndIdempotentWait(t *testing.T) {
	tb := New()
	mustWait(t, tb, "k", "a", 0, 10*sec, NoDeadline)
	mustWait(t, tb, "k", "b", 1, 10*sec, NoDeadline)
	mustWait(t, tb, "k", "c", 1, 10*sec, NoDeadline)
	mustWait(t, tb, "k", "b", 2, 5*sec, NoDeadline) // keeps its place
	if got := tb.Waiters("k"); !reflect.DeepEqual(got, []string{"b", "c"}) {
		t.Fatalf("queue %v", got)
	}
	if !tb.CancelWait("k", "b") || tb.CancelWait("k", "b") || tb.CancelWait("nope", "b") {
		t.Fatal("cancel answers")
	}
	if ok, _ := tb.Release("k", "a", 3); !ok {
		t.Fatal("release")
	}
	if l, _ := tb.Get("k", 3); l.Holder != "c" {
		t.Fatalf("holder %q, want c", l.Holder)
	}
	tb.CancelWait("k", "c") // c holds, is not queued: no effect
	if l, _ := tb.Get("k", 3); l.Holder != "c" {
		t.Fatal("CancelWait touched a lease")
	}
}

// The holder itself calling Wait is a renewal, not a self-deadlock.
func TestWaitByHolderRenews(t *testing.T) {
	tb := New()
	mustWait(t, tb, "k", "a", 0, 10*sec, NoDeadline)
	l, granted, err := tb.Wait("k", "a", 1, 10*sec, NoDeadline)
	if err != nil || !granted || l.Token != 2 {
		t.Fatalf("%+v %v %v", l, granted, err)
	}
}

// A queued holder that acquires directly (the key fell free to it) leaves
// the queue.
func TestGrantRemovesFromQueue(t *testing.T) {
	tb := New()
	mustWait(t, tb, "k", "a", 0, 10*sec, NoDeadline)
	mustWait(t, tb, "k", "b", 1, 10*sec, NoDeadline)
	mustWait(t, tb, "k", "c", 1, 10*sec, NoDeadline)
	tb.CancelWait("k", "b")
	tb.Release("k", "a", 2) // c granted
	if len(tb.Waiters("k")) != 0 {
		t.Fatalf("queue %v", tb.Waiters("k"))
	}
}

func TestListAndGet(t *testing.T) {
	tb := New()
	for i, k := range []string{"jobs/b", "jobs/a", "other", "jobs/c"} {
		if _, err := tb.Acquire(k, "h", 0, Duration(i+1)*sec); err != nil {
			t.Fatal(err)
		}
	}
	got := tb.List("jobs/", at(1.5), 0)
	var keys []string
	for _, l := range got {
		keys = append(keys, l.Key)
	}
	// jobs/b had ttl 1 s and has expired at 1.5 s.
	if !reflect.DeepEqual(keys, []string{"jobs/a", "jobs/c"}) {
		t.Fatalf("list %v", keys)
	}
	if got := tb.List("", at(0), 2); len(got) != 2 || got[0].Key != "jobs/a" {
		t.Fatalf("limited list %v", got)
	}
	if _, ok := tb.Get("jobs/b", at(1.5)); ok {
		t.Fatal("get returned an expired lease")
	}
	if l, ok := tb.Get("other", at(1.5)); !ok || l.Remaining(at(1.5)) != Duration(at(1.5)) {
		t.Fatalf("get other: %+v", l)
	}
}
