package locktable

import (
	"slices"
	"testing"
)

// QueueOf answers the head of a key's queue in order, at most max of it,
// and the queue's length; a key without a queue answers nothing.
func TestQueueOfIsTheHeadOfTheQueueInOrder(t *testing.T) {
	tb := New()
	if _, err := tb.Acquire("k", "owner", 0, 10*Second); err != nil {
		t.Fatal(err)
	}
	for i, h := range []string{"a", "b", "c"} {
		if _, granted, err := tb.Wait("k", h, Time(i+1), 10*Second, Time(100*Second)); err != nil || granted {
			t.Fatalf("wait %s: granted %v, %v", h, granted, err)
		}
	}
	holders := func(qs []Queued) []string {
		var out []string
		for _, q := range qs {
			out = append(out, q.Holder)
		}
		return out
	}
	qs, n := tb.QueueOf("k", 2)
	if n != 3 || !slices.Equal(holders(qs), []string{"a", "b"}) || qs[0].Since != 1 || qs[1].Since != 2 || qs[0].Deadline != Time(100*Second) {
		t.Errorf("QueueOf(k, 2) = %+v, %d", qs, n)
	}
	if qs, n := tb.QueueOf("k", 0); n != 3 || !slices.Equal(holders(qs), []string{"a", "b", "c"}) {
		t.Errorf("QueueOf(k, 0) = %+v, %d", qs, n)
	}
	if qs, n := tb.QueueOf("none", 5); qs != nil || n != 0 {
		t.Errorf("QueueOf(none) = %+v, %d", qs, n)
	}
	if _, err := tb.Release("k", "owner", 5); err != nil {
		t.Fatal(err)
	}
	if qs, n := tb.QueueOf("k", 5); n != 2 || !slices.Equal(holders(qs), []string{"b", "c"}) {
		t.Errorf("after a hand-off to a: %+v, %d", qs, n)
	}
}
