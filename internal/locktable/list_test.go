package locktable

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// TestListWorkIsBounded: a page costs O(page + log n), not a scan of the
// table. With 20,000 live leases, a page of 10 looks at no more than the
// 10 leases it answers and the one key after them, wherever the page
// starts and whichever prefix selects it.
func TestListWorkIsBounded(t *testing.T) {
	tb := New()
	for i := range 10000 {
		for _, p := range []string{"a/", "b/"} {
			if _, err := tb.Acquire(fmt.Sprintf("%s%05d", p, i), "h", 0, Second); err != nil {
				t.Fatal(err)
			}
		}
	}
	visited := 0
	tb.visit = func() { visited++ }
	for _, c := range []struct{ prefix, after string }{
		{"", ""}, {"a/", ""}, {"b/", ""}, {"b/", "b/05000"}, {"a/", "a/09995"}, {"c/", ""},
	} {
		visited = 0
		got := tb.ListAfter(c.prefix, c.after, 1, 10)
		if visited > 11 {
			t.Errorf("ListAfter(%q, %q, limit 10) looked at %d entries of %d; want at most 11", c.prefix, c.after, visited, tb.Len())
		}
		if len(got) > 10 {
			t.Errorf("ListAfter(%q, %q) answered %d leases, limit 10", c.prefix, c.after, len(got))
		}
	}
}

// scanList is List as it was before the key index: a scan of every entry,
// then a sort. The index must answer exactly what it answered.
func scanList(t *Table, prefix, after string, now Time, limit int) []Lease {
	var out []Lease
	for _, e := range indexedEntries(&t.keys) {
		if k := e.key; e.held() && e.alive(now) && strings.HasPrefix(k, prefix) && k > after {
			out = append(out, e.lease())
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out
}

// TestListMatchesScan: on random tables (grants, renewals, waits,
// releases, expiries by Tick and leases expired that no Tick has ended
// yet, snapshot round trips) ListAfter answers what the scan answers, for
// random prefixes, cursors, times and limits; and the index holds exactly
// the table's entries.
func TestListMatchesScan(t *testing.T) {
	keys := []string{"a", "a/1", "a/2", "a/2/x", "ab", "b", "b/1", "b/10", "b/2", "c\x00", "c\xff", "z"}
	holders := []string{"h1", "h2", "h3"}
	rapid.Check(t, func(rt *rapid.T) {
		tb := New()
		now := Time(0)
		key := rapid.SampledFrom(keys)
		holder := rapid.SampledFrom(holders)
		n := rapid.IntRange(0, 60).Draw(rt, "ops")
		for range n {
			now += Time(rapid.IntRange(0, 3).Draw(rt, "step")) * Time(Second)
			ttl := Duration(rapid.IntRange(1, 4).Draw(rt, "ttl")) * Second
			switch rapid.IntRange(0, 6).Draw(rt, "op") {
			case 0, 1:
				_, _ = tb.Acquire(key.Draw(rt, "key"), holder.Draw(rt, "holder"), now, ttl)
			case 2:
				_, _, _ = tb.Wait(key.Draw(rt, "key"), holder.Draw(rt, "holder"), now, ttl, now+Time(2*Second))
			case 3:
				_, _ = tb.Release(key.Draw(rt, "key"), holder.Draw(rt, "holder"), now)
			case 4:
				tb.CancelWait(key.Draw(rt, "key"), holder.Draw(rt, "holder"))
			case 5:
				tb.Tick(now)
			case 6:
				b, err := tb.MarshalBinary()
				if err != nil {
					rt.Fatal(err)
				}
				back := New()
				if err := back.UnmarshalBinary(b); err != nil {
					rt.Fatal(err)
				}
				tb = back
			}
		}
		all := indexedEntries(&tb.keys)
		for _, e := range all {
			if got, ok := tb.index.Get(e); !ok || got != e {
				rt.Fatalf("%q is in the table but not in the index", e.key)
			}
		}
		if tb.index.Len() != len(all) || len(all) != tb.keys.len() {
			rt.Fatalf("index has %d entries, the table %d (it counts %d)", tb.index.Len(), len(all), tb.keys.len())
		}
		for range 20 {
			prefix := rapid.SampledFrom(append([]string{"", "a/", "b/1", "c", "zz"}, keys...)).Draw(rt, "prefix")
			after := rapid.SampledFrom(append([]string{"", "a/1", "b", "b/1\x00", "\xff"}, keys...)).Draw(rt, "after")
			at := now + Time(rapid.IntRange(-2, 4).Draw(rt, "at"))*Time(Second)
			limit := rapid.IntRange(-1, 5).Draw(rt, "limit")
			want := scanList(tb, prefix, after, at, limit)
			got := tb.ListAfter(prefix, after, at, limit)
			if !slices.Equal(got, want) {
				rt.Fatalf("ListAfter(%q, %q, %d, %d) = %v; the scan answers %v", prefix, after, at, limit, got, want)
			}
			if after == "" && !slices.Equal(tb.List(prefix, at, limit), want) {
				rt.Fatalf("List(%q, %d, %d) differs from the scan", prefix, at, limit)
			}
		}
	})
}
