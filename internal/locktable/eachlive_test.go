package locktable

import (
	"fmt"
	"slices"
	"testing"
)

// EachLive visits exactly the keys List returns: held, alive at now, in
// key order (a key with only an expired, unticked lease is skipped).
func TestEachLiveMatchesList(t *testing.T) {
	tb := New()
	for i, k := range []string{"b/2", "a", "b/1", "c"} {
		if _, err := tb.Acquire(k, "h", 0, Duration(i+1)*Second); err != nil {
			t.Fatal(err)
		}
	}
	for _, now := range []Time{0, Time(Second), Time(2 * Second), Time(4 * Second)} {
		var want, got []string
		for _, l := range tb.List("", now, 0) {
			want = append(want, l.Key)
		}
		tb.EachLive(now, func(k string) { got = append(got, k) })
		if !slices.Equal(got, want) {
			t.Errorf("at %v: EachLive %v, List %v", now, got, want)
		}
	}
}

// BenchmarkEachLive is the cost of counting a million live leases (one
// fencelock_leases scrape on a large table).
func BenchmarkEachLive(b *testing.B) {
	tb := New()
	for i := range 1_000_000 {
		if _, err := tb.Acquire(fmt.Sprintf("p%02d/%07d", i%50, i), "h", 0, Second); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		n := 0
		tb.EachLive(0, func(string) { n++ })
		if n != 1_000_000 {
			b.Fatal(n)
		}
	}
}
